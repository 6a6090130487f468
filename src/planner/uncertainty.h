#pragma once
// How far a predicted step time can be trusted: an interval [low, high] around it from the figures of the
// cluster description that were not measured on the device.
//
// Each figure's source says how it was obtained (figure_basis): measured on the device ("fitted by
// `strata fit-device` ...", "measured by ...", `strata calibrate`), the vendor's specification (a datasheet,
// whitepaper or guide figure such as the matrix peak or the memory bandwidth, exact as a figure; what a kernel
// reaches of it is an efficiency figure of its own), or assumed (everything else: assumptions, other devices'
// or papers' figures). Every assumed figure that prices time is made `range` worse and `range` better in turn
// (an efficiency or rate times 1 -/+ range, a cost times 1 +/- range), the plans priced again, and the changes
// of their step times added up: high = step + the sum of the slowdowns, low = step - the sum of the speedups.
// Summing (the worst case) rather than a root-sum-square: the assumed figures were chosen alike and err alike
// (35 of the 38 published runs of bench/planner/validate.sh are predicted too fast), so their errors are not
// independent and a root-sum-square would understate the interval.
#include <string>
#include <vector>

#include "planner/cost_model.h"

namespace strata {

enum class FigureBasis { Measured, Specification, Assumed };
FigureBasis figure_basis(const std::string& source);

// One figure of the pricing varied as a whole (e.g. the GEMM tiles' efficiencies) and the assumed keys of the
// description it stands for.
struct UncertainFigure {
  std::string figure;
  std::vector<std::string> keys;  // full dotted keys, e.g. "device.bf16.gemm_tiles"
};

// The figures of `problem`'s cluster whose assumed values price time. A key without a recorded source counts
// as assumed.
std::vector<UncertainFigure> uncertain_figures(const PlanningProblem& problem);

struct StepInterval {
  double low_s = 0;
  double high_s = 0;
};
// Whether the two intervals share a point: then the ranking between their plans is not certain.
bool intervals_overlap(const StepInterval& a, const StepInterval& b);

struct StepIntervals {
  double range = 0;                      // each assumed figure +/- this fraction
  std::vector<UncertainFigure> figures;  // the figures varied
  std::vector<StepInterval> plans;       // one per plan, in the order given
  // Per plan, how much the figures can close its lead over the first plan (or the first's over it), added up
  // as the intervals are: a figure that slows both alike closes nothing. The order of the two holds against
  // the assumed figures when the gap between their step times is larger.
  std::vector<double> gap_closing_s;
};
// Whether plan `i` of `plans` stays behind plan 0 however the assumed figures err (i > 0).
bool order_holds(const StepIntervals& intervals, const std::vector<Prediction>& plans, size_t i);

// The intervals of `plans` (predictions of `model`, schedules replayed) with every assumed figure +/- `range`
// (in [0, 1)). Prices each plan twice per uncertain figure.
StepIntervals step_intervals(const CostModel& model, const std::vector<Prediction>& plans, double range);

}  // namespace strata
