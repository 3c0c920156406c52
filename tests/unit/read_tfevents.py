#!/usr/bin/env python3
"""Reads TensorBoard event files with Python's standard library only, as an independent check
of dtrain's writer (src/telemetry/tensorboard.cpp).

Each file is a sequence of TFRecords: uint64 length, uint32 masked CRC-32C of the length's 8
bytes, the data, uint32 masked CRC-32C of the data (little-endian). Every CRC is checked. The
data is a tensorflow.Event protobuf, decoded here field by field:
  Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
  Summary { repeated Value value = 1; }   Value { string tag = 1; float simple_value = 2; }

Usage: read_tfevents.py PATH...  (files, or folders whose events.out.tfevents.* files are read
in name order). Prints one JSON object per event:
  {"file": ..., "wall_time": ..., "step": ..., "file_version": ... | "values": {tag: value}}
A bad CRC, a truncated record or a malformed protobuf exits with status 1 and says where.
"""
import json
import os
import struct
import sys

CRC32C_POLY = 0x82F63B78  # Castagnoli, reflected


def _table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ CRC32C_POLY if c & 1 else c >> 1
        table.append(c)
    return table


TABLE = _table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class Bad(Exception):
    pass


def varint(buf, pos):
    shift = result = 0
    while True:
        if pos >= len(buf):
            raise Bad("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise Bad("varint longer than 10 bytes")


def fields(buf):
    """(field number, wire type, value) of each field: ints for varints, bytes otherwise."""
    pos = 0
    while pos < len(buf):
        key, pos = varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            n, pos = varint(buf, pos)
            value, pos = buf[pos:pos + n], pos + n
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise Bad("unsupported wire type %d" % wire)
        if pos > len(buf):
            raise Bad("field %d runs past the message" % number)
        yield number, wire, value


def decode_event(data):
    event = {}
    for number, wire, value in fields(data):
        if number == 1 and wire == 1:
            event["wall_time"] = struct.unpack("<d", value)[0]
        elif number == 2 and wire == 0:
            event["step"] = value - (1 << 64) if value >= 1 << 63 else value
        elif number == 3 and wire == 2:
            event["file_version"] = value.decode("utf-8")
        elif number == 5 and wire == 2:
            values = event.setdefault("values", {})
            for n, w, v in fields(value):
                if n != 1 or w != 2:
                    raise Bad("Summary field %d (wire %d) is not a Value" % (n, w))
                tag = simple = None
                for vn, vw, vv in fields(v):
                    if vn == 1 and vw == 2:
                        tag = vv.decode("utf-8")
                    elif vn == 2 and vw == 5:
                        simple = struct.unpack("<f", vv)[0]
                if tag is None or simple is None:
                    raise Bad("a Value without a tag or a simple_value")
                values[tag] = simple
        else:
            raise Bad("unexpected Event field %d (wire %d)" % (number, wire))
    return event


def read_file(path):
    with open(path, "rb") as f:
        buf = f.read()
    pos, events = 0, []
    while pos < len(buf):
        where = "%s at byte %d" % (path, pos)
        if pos + 12 > len(buf):
            raise Bad("%s: truncated record header" % where)
        header = buf[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", buf[pos + 8:pos + 12])
        if length_crc != masked(header):
            raise Bad("%s: length CRC %08x, expected %08x" % (where, length_crc, masked(header)))
        start, end = pos + 12, pos + 12 + length
        if end + 4 > len(buf):
            raise Bad("%s: truncated record of %d bytes" % (where, length))
        data = buf[start:end]
        (data_crc,) = struct.unpack("<I", buf[end:end + 4])
        if data_crc != masked(data):
            raise Bad("%s: data CRC %08x, expected %08x" % (where, data_crc, masked(data)))
        try:
            event = decode_event(data)
        except Bad as e:
            raise Bad("%s: %s" % (where, e))
        event["file"] = os.path.basename(path)
        events.append(event)
        pos = end + 4
    return events


def event_files(path):
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path) if n.startswith("events.out.tfevents."))
        return [os.path.join(path, n) for n in names]
    return [path]


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        for p in argv[1:]:
            for f in event_files(p):
                for event in read_file(f):
                    print(json.dumps(event, sort_keys=True))
    except (Bad, OSError) as e:
        print("read_tfevents: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
