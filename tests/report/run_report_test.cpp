// strata report's readers and document against hand-made run directories: every recorded step
// reaches its plot, damaged files fail naming the file and line or key, configs differ by key.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "report/config_diff.h"
#include "report/decimate.h"
#include "report/report_document.h"
#include "report/run_record.h"
#include "support/error_text.h"
#include "support/test_files.h"

namespace strata {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::error_of;
using testing::TempDir;
using testing::write_bytes;

constexpr std::string_view kConfig = R"([model]
family = 'gpt2'
n_layer = 2
[ops]
backend = 'cpu'
[precision]
compute = 'f16'
fp32_ops = ['adamw', 'layernorm']
[train]
steps = 4
)";

// Four steps: validation on 2 and 4, an fp16 overflow skipped at step 3 (its norm written as null).
constexpr std::string_view kMetrics =
    R"({"step":1,"loss":5.0,"lr":0.1,"grad_norm":2.0,"tokens":64,"elapsed_s":1,"tokens_per_s":64,"loss_scale":65536}
{"step":2,"loss":4.5,"lr":0.2,"grad_norm":1.5,"tokens":128,"elapsed_s":2,"tokens_per_s":70,"loss_scale":65536,"val_loss":4.7}
{"step":3,"loss":4.4,"lr":0.3,"grad_norm":null,"tokens":192,"elapsed_s":3,"tokens_per_s":66,"loss_scale":32768,"skipped":true,"skip_reason":"inf"}
{"step":4,"loss":4.0,"lr":0.4,"grad_norm":1.0,"tokens":256,"elapsed_s":4,"tokens_per_s":74,"loss_scale":32768,"val_loss":4.2}
)";

void write_run(const std::filesystem::path& dir, std::string_view metrics = kMetrics,
               std::string_view config = kConfig) {
  std::filesystem::create_directories(dir);
  write_bytes(dir / "metrics.jsonl", metrics);
  write_bytes(dir / "config.toml", config);
}

TEST(RunRecord, KeepsEveryRecordedStepOfEachMetric) {
  TempDir temp;
  write_run(temp / "run");
  const RunRecord run = read_run(temp / "run");
  EXPECT_THAT(run.metrics.at("loss").steps, ElementsAre(1, 2, 3, 4));
  EXPECT_THAT(run.metrics.at("loss").values, ElementsAre(5.0, 4.5, 4.4, 4.0));
  EXPECT_THAT(run.metrics.at("val_loss").steps, ElementsAre(2, 4));
  EXPECT_THAT(run.metrics.at("loss_scale").values, ElementsAre(65536, 65536, 32768, 32768));
  const MetricSeries& norm = run.metrics.at("grad_norm");
  ASSERT_EQ(norm.values.size(), 4u);
  EXPECT_TRUE(std::isnan(norm.values[2]));  // written as null
  EXPECT_THAT(run.skipped_steps, ElementsAre(3));
  EXPECT_EQ(run.last_step(), 4);
  EXPECT_FALSE(run.plan);
  EXPECT_FALSE(run.ops);
}

TEST(RunRecord, ConfigValuesAreTomlTextByDottedKey) {
  TempDir temp;
  write_run(temp / "run");
  const RunRecord run = read_run(temp / "run");
  EXPECT_EQ(run.config.at("model.n_layer"), "2");
  EXPECT_EQ(run.config.at("ops.backend"), "\"cpu\"");
  EXPECT_EQ(run.config.at("precision.fp32_ops"), "[ \"adamw\", \"layernorm\" ]");
  EXPECT_EQ(run.config.size(), 6u);
}

TEST(RunRecord, DamagedFilesNameTheFileAndWhat) {
  TempDir temp;
  const std::filesystem::path dir = temp / "run";
  std::filesystem::create_directories(dir);
  EXPECT_THAT(error_of([&] { read_run(temp / "absent"); }), HasSubstr("not a directory"));
  EXPECT_THAT(error_of([&] { read_run(dir); }), HasSubstr("has no metrics.jsonl"));

  auto error_for = [&](std::string_view metrics) {
    write_run(dir, metrics);
    return error_of([&] { read_run(dir); });
  };
  const std::string metrics = (dir / "metrics.jsonl").string();
  EXPECT_THAT(error_for("{\"step\":1,\"loss\":2}\n{\"step\":2,\"loss\":\n"), HasSubstr(metrics + ":2"));
  EXPECT_THAT(error_for("{\"step\":2}\n{\"step\":2}\n"),
              HasSubstr(metrics + ":2: step 2 does not follow step 2"));
  EXPECT_THAT(error_for("{\"step\":1.5}\n"), HasSubstr(metrics + ":1: key 'step' must be an integer"));
  EXPECT_THAT(error_for("{\"step\":1,\"loss\":\"low\"}\n"), HasSubstr(metrics + ":1: key 'loss' must be a number"));
  EXPECT_THAT(error_for("[1]\n"), HasSubstr("expected one JSON object per line"));
  EXPECT_THAT(error_for(""), HasSubstr(metrics + ": no steps recorded"));

  write_run(dir, kMetrics, "[model\nn_layer = 2\n");
  EXPECT_THAT(error_of([&] { read_run(dir); }), HasSubstr((dir / "config.toml").string() + ":1:"));
  std::filesystem::remove(dir / "config.toml");
  EXPECT_THAT(error_of([&] { read_run(dir); }), HasSubstr("has no config.toml"));
}

TEST(ConfigDiff, ListsKeysThatDifferOrAreMissing) {
  const ConfigDiff diff = diff_configs({{{"a", "1"}, {"b", "'x'"}, {"c", "2"}},
                                        {{"a", "1"}, {"b", "'y'"}},
                                        {{"a", "1"}, {"b", "'x'"}, {"c", "2"}}});
  EXPECT_EQ(diff.agreeing, 1);
  ASSERT_EQ(diff.differing.size(), 2u);
  EXPECT_EQ(diff.differing[0].key, "b");
  EXPECT_THAT(diff.differing[0].values, ElementsAre("'x'", "'y'", "'x'"));
  EXPECT_EQ(diff.differing[1].key, "c");
  EXPECT_THAT(diff.differing[1].values, ElementsAre("2", std::nullopt, "2"));
}

const nlohmann::json& plot_named(const nlohmann::json& document, const std::string& id) {
  for (const nlohmann::json& plot : document["plots"]) {
    if (plot["id"] == id) return plot;
  }
  throw std::runtime_error("no plot " + id);
}

TEST(ReportDocument, OneSeriesPerRunWithEveryStep) {
  TempDir temp;
  write_run(temp / "a");
  // Another run without fp16 (no loss scale) and no validation.
  write_run(temp / "b", "{\"step\":1,\"loss\":6,\"lr\":0.1,\"grad_norm\":3,\"tokens\":8,\"tokens_per_s\":9}\n");
  const nlohmann::json document = report_document({read_run(temp / "a"), read_run(temp / "b")}, {"a", "b"});
  const nlohmann::json& loss = plot_named(document, "loss");
  ASSERT_EQ(loss["series"].size(), 2u);
  EXPECT_EQ(loss["series"][0]["steps"], nlohmann::json({1, 2, 3, 4}));
  EXPECT_EQ(loss["series"][1]["steps"], nlohmann::json({1}));
  EXPECT_EQ(plot_named(document, "loss_scale")["series"].size(), 1u);
  EXPECT_TRUE(plot_named(document, "grad_norm")["series"][0]["values"][2].is_null());
  for (const char* required : {"loss", "val_loss", "lr", "grad_norm", "tokens_per_s", "loss_scale"}) {
    EXPECT_NO_THROW(plot_named(document, required));
  }
  EXPECT_THROW(plot_named(document, "comm_wait_s"), std::runtime_error);  // no run waited on peers
  EXPECT_THROW(plot_named(document, "router_aux_loss"), std::runtime_error);  // dense models
  EXPECT_EQ(document["runs"][0]["skipped_steps"], nlohmann::json({3}));
  // Steps 2-4 ran at 70, 66 and 74 tokens/s: their median, as strata train reports step time.
  EXPECT_EQ(document["runs"][0]["summary"][7], nlohmann::json({"tokens/s (median after the first step)", "70"}));
  EXPECT_EQ(document["runs"][1]["summary"][7], nlohmann::json({"tokens/s (median after the first step)", "9"}));
  EXPECT_EQ(document["planner"][0]["missing"], "no plan.json (a run of an older Strata)");

  const nlohmann::json alone = report_document({read_run(temp / "b")}, {"b"});
  EXPECT_EQ(plot_named(alone, "loss_scale")["note"],
            "no run used dynamic loss scaling (only precision.compute = f16 does)");
  EXPECT_EQ(plot_named(alone, "val_loss")["note"], "no run validated (train.val_every = 0)");
}

TEST(ReportDocument, AMixtureOfExpertsRunPlotsItsRouter) {
  TempDir temp;
  write_run(temp / "moe",
            "{\"step\":1,\"loss\":6,\"router_aux_loss\":2.5,\"router_z_loss\":4,\"expert_tokens_min\":10,"
            "\"expert_tokens_max\":90,\"expert_tokens_mean\":50,\"expert_tokens_dropped\":3}\n"
            "{\"step\":2,\"loss\":5,\"router_aux_loss\":2.1,\"router_z_loss\":3,\"expert_tokens_min\":40,"
            "\"expert_tokens_max\":60,\"expert_tokens_mean\":50,\"expert_tokens_dropped\":0}\n");
  const nlohmann::json document = report_document({read_run(temp / "moe")}, {"moe"});
  EXPECT_EQ(plot_named(document, "router_aux_loss")["series"][0]["values"], nlohmann::json({2.5, 2.1}));
  EXPECT_EQ(plot_named(document, "router_z_loss")["series"][0]["values"], nlohmann::json({4, 3}));
  EXPECT_EQ(plot_named(document, "expert_tokens_max")["series"][0]["values"], nlohmann::json({90, 60}));
  EXPECT_EQ(plot_named(document, "expert_tokens_min")["series"][0]["values"], nlohmann::json({10, 40}));
  EXPECT_EQ(plot_named(document, "expert_tokens_dropped")["series"][0]["values"], nlohmann::json({3, 0}));
}

TEST(ReportDocument, PlannerFiguresComeFromPlanJson) {
  TempDir temp;
  write_run(temp / "a");
  write_bytes(temp / "a" / "plan.json",
              R"({"cluster":"c","chosen":{"plan":{"description":"dp=2"},"step_s":2.0,
                 "time_s":{"compute":1.5,"bubble":0,"dp_comm":0.5}},"measured":{"step_s":2.5,"steps":3}})");
  const nlohmann::json entry = report_document({read_run(temp / "a")}, {"a"})["planner"][0];
  EXPECT_EQ(entry["plan"], "dp=2");
  EXPECT_EQ(entry["predicted_s"], 2.0);
  EXPECT_EQ(entry["measured_s"], 2.5);
  EXPECT_EQ(entry["terms"], nlohmann::json::parse(R"([["compute",1.5],["dp_comm",0.5]])"));  // zero terms left out

  write_bytes(temp / "a" / "plan.json", R"({"chosen":{"plan":{}}})");
  EXPECT_THAT(error_of([&] { report_document({read_run(temp / "a")}, {"a"}); }),
              HasSubstr("'" + (temp / "a" / "plan.json").string() + "': chosen.plan.description is missing"));
}

TEST(ReportDocument, DamagedOpsRecordNamesTheKey) {
  TempDir temp;
  write_run(temp / "a");
  write_bytes(temp / "a" / "ops.json",
              R"({"coverage":{"backend":"cpu","precision":"f32","ops":[{"op":"matmul","dtype":"f32","route":"native",
                 "count":"many","share":1}],"verdict":{"text":"quick switch","quick_switch":true}},
                 "ran_not_native":[]})");
  EXPECT_THAT(error_of([&] { report_document({read_run(temp / "a")}, {"a"}); }),
              HasSubstr("ops.json': coverage.ops[0].count is \"many\", expected a number"));
}

TEST(ReportDocument, LabelsAreDirectoryNamesUnlessTwoShareOne) {
  EXPECT_THAT(run_labels({"runs/cuda", "runs/cpu/"}), ElementsAre("cuda", "cpu"));
  EXPECT_THAT(run_labels({"x/run", "y/run"}), ElementsAre("x/run", "y/run"));
}

// A million-step run's loss: thinned to the limit, every bucket's extremes kept, so the spike and
// the global minimum are drawn; a short series is drawn whole.
TEST(ThinForDrawing, KeepsEachBucketsLowestAndHighest) {
  MetricSeries long_run;
  for (int64_t step = 1; step <= 1000000; ++step) {
    long_run.steps.push_back(step);
    long_run.values.push_back(step == 777777 ? 50.0 : 10.0 - 1e-5 * static_cast<double>(step % 1000));
  }
  long_run.values[123456] = std::nan("");
  const MetricSeries drawn = thin_for_drawing(long_run, 1000);
  EXPECT_LE(drawn.steps.size(), 1000u);
  EXPECT_GE(drawn.steps.size(), 990u);
  EXPECT_TRUE(std::is_sorted(drawn.steps.begin(), drawn.steps.end()));
  EXPECT_EQ(std::adjacent_find(drawn.steps.begin(), drawn.steps.end()), drawn.steps.end());
  EXPECT_NE(std::find(drawn.steps.begin(), drawn.steps.end(), 777777), drawn.steps.end());  // the spike
  EXPECT_EQ(*std::max_element(drawn.values.begin(), drawn.values.end()), 50.0);
  EXPECT_EQ(*std::min_element(drawn.values.begin(), drawn.values.end()), 10.0 - 1e-5 * 999);
  EXPECT_TRUE(std::none_of(drawn.values.begin(), drawn.values.end(), [](double v) { return std::isnan(v); }));

  MetricSeries short_run{{1, 2, 3}, {3.0, std::nan(""), 1.0}};
  const MetricSeries whole = thin_for_drawing(short_run, 1000);
  EXPECT_THAT(whole.steps, ElementsAre(1, 2, 3));
  EXPECT_TRUE(std::isnan(whole.values[1]));
}

}  // namespace
}  // namespace strata
