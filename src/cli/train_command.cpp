#include <fmt/core.h>

#include "cli/commands.h"
#include "train/trainer.h"

namespace strata::cli {

void add_train_command(CLI::App& app) {
  auto* command = app.add_subcommand("train", "Train a model from a TOML config");
  auto config_path = std::make_shared<std::string>();
  auto overrides = std::make_shared<std::vector<std::string>>();
  command->add_option("config", *config_path, "TOML config file")->required();
  command->add_option("--set", *overrides, "Override a config key: --set train.lr=3e-4 (repeatable)");
  auto profile = std::make_shared<bool>(false);
  command->add_flag("--profile", *profile, "Time every kernel and print the time per op type at the end");
  command->callback([config_path, overrides, profile] {
    Trainer trainer(load_train_config(*config_path, *overrides));
    if (*profile) trainer.enable_profiling();
    trainer.run();
  });
}

}  // namespace strata::cli
