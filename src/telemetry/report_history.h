// The records a resumed run's report draws from earlier processes: the train and eval records of
// the run directory's metrics.jsonl up to the step the run resumed from, so that report.html's
// charts span the whole run. Records past a resume point were trained again after it (the
// file's "resume" record says from which step) and are left out, for each resume the file holds.
#pragma once

#include <cstdint>
#include <string>

#include "telemetry/report_html.h"

namespace dtrain::detail {

// Adds to `series` the train and eval records of `metrics_path` (metrics.jsonl) that hold up to
// `resumed_step` and are not superseded by a later "resume" record, in file order. Test
// accuracy is taken only when `classification`. A line that is not a JSON object (a process
// killed mid-write) is passed over; the count of such lines is returned. A missing file adds
// nothing; a file that cannot be read is an Error naming it.
int64_t add_earlier_records(const std::string& metrics_path, int64_t resumed_step,
                            bool classification, ReportSeries& series);

}  // namespace dtrain::detail
