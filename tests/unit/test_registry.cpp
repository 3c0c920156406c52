// The model registry (models.h): the built-in models by name, user models registered from C++,
// and factories that build the same architecture for the same config on every call.
#include <gtest/gtest.h>

#include <torch/nn/modules/linear.h>

#include <memory>
#include <string>
#include <vector>

#include "dtrain/config.h"
#include "dtrain/models.h"
#include "test_support.h"

namespace dtrain {
namespace detail {
void register_builtin_models();  // models/builtin.cpp
}
namespace {

std::vector<std::string> names() {
  std::vector<std::string> n;
  for (const auto& [name, description] : registered_models()) {
    n.push_back(name);
    EXPECT_FALSE(description.empty()) << name;
  }
  return n;
}

bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TEST(Registry, ListsTheBuiltInModelsSortedByName) {
  const auto n = names();
  for (const char* builtin : {"cnn", "gpt", "linear", "mlp", "resnet18", "resnet50"})
    EXPECT_TRUE(has(n, builtin)) << builtin;
  EXPECT_TRUE(std::is_sorted(n.begin(), n.end()));
}

// A classification task's DataSpec: float samples of `shape`, `classes` classes.
DataSpec spec(std::vector<int64_t> shape, int64_t classes) {
  DataSpec d;
  d.input_shape = std::move(shape);
  d.num_classes = classes;
  return d;
}

TEST(Registry, UnknownNameIsAnErrorNamingTheKeyAndTheKnownNames) {
  const std::string msg =
      test::message_of([] { make_model("transformer-xl", ModelConfig{}, spec({4}, 3)); });
  EXPECT_NE(msg.find("model.name"), std::string::npos) << msg;
  EXPECT_NE(msg.find("transformer-xl"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mlp"), std::string::npos) << msg;
}

TEST(Registry, AUserModelIsBuiltByName) {
  struct Tiny : Model {
    Tiny(int64_t in, int64_t out) : fc(register_module("fc", torch::nn::Linear(in, out))) {}
    at::Tensor forward(const at::Tensor& x) override { return fc->forward(x); }
    torch::nn::Linear fc;
  };
  register_model(
      "test_tiny",
      [](const ModelConfig&, const DataSpec& d) -> std::shared_ptr<Model> {
        return std::make_shared<Tiny>(d.input_shape.at(0), d.num_classes);
      },
      "test: one Linear");
  EXPECT_TRUE(has(names(), "test_tiny"));
  auto m = make_model("test_tiny", ModelConfig{}, spec({5}, 2));
  EXPECT_EQ(m->forward(at::zeros({3, 5})).sizes().vec(), (std::vector<int64_t>{3, 2}));
}

// A program that registers a model under a built-in's name before anything looked a model up
// keeps it: the built-ins, registered on first use, do not overwrite it. (ctest runs each test in
// a process of its own, so nothing has been looked up before.)
TEST(Registry, AModelRegisteredFirstUnderABuiltInsNameIsNotOverwritten) {
  struct Tiny : Model {
    Tiny() : fc(register_module("fc", torch::nn::Linear(5, 2))) {}
    at::Tensor forward(const at::Tensor& x) override { return fc->forward(x); }
    torch::nn::Linear fc;
  };
  register_model(
      "mlp",
      [](const ModelConfig&, const DataSpec&) -> std::shared_ptr<Model> {
        return std::make_shared<Tiny>();
      },
      "test: mine, not the built-in mlp");
  const auto models = registered_models();
  for (const auto& [name, description] : models) {
    if (name == "mlp") {
      EXPECT_EQ(description, "test: mine, not the built-in mlp");
    }
  }
  EXPECT_TRUE(has(names(), "cnn"));  // the other built-ins are there
  auto m = make_model("mlp", ModelConfig{}, spec({5}, 2));
  EXPECT_NE(dynamic_cast<Tiny*>(m.get()), nullptr);
  detail::register_builtin_models();  // the built-in mlp again, for later tests in this process
}

TEST(Registry, TheSameConfigBuildsTheSameArchitecture) {
  // What every rank relies on before rank 0's values are broadcast: names, shapes, order.
  const DataSpec data = spec({1, 28, 28}, 10);
  for (const char* name : {"mlp", "cnn", "linear"}) {
    ModelConfig cfg;
    at::manual_seed(1);
    auto a = make_model(name, cfg, data);
    at::manual_seed(2);
    auto b = make_model(name, cfg, data);
    const auto pa = a->named_parameters(), pb = b->named_parameters();
    ASSERT_EQ(pa.size(), pb.size()) << name;
    for (size_t i = 0; i < pa.size(); ++i) {
      EXPECT_EQ(pa[i].key(), pb[i].key()) << name;
      EXPECT_EQ(pa[i].value().sizes(), pb[i].value().sizes()) << name << " " << pa[i].key();
    }
  }
}

}  // namespace
}  // namespace dtrain
