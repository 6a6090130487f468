// embedding, embedding_backward, cross_entropy and cross_entropy_backward in f32, over the whole
// vocabulary or a shard of it (ops/vocab_shard.h); ids and targets i32 or i64 (the program is built
// once per index dtype).
//
// Ids and targets live on the device, where a kernel cannot fail: they are checked against the
// vocabulary where the batch is made (data/token_loader.cpp). An id outside [0, vocab_size) that
// reaches these kernels anyway is never read through: it makes its embedding row, its target
// logit (so the loss) and its row of dlogits NaN, so it shows in the loss rather than vanishing.
// embedding_backward leaves such ids out, as it does ids another shard holds.
//
// embedding_backward is deterministic without float atomics: positions are sorted by (row, position)
// (a bitonic sort of 64-bit keys), then one work-item per dweight element sums its row's positions in
// position order, as the cpu kernel does. cross_entropy's per-position log-sum-exps are reduced by one
// work-group per row in a fixed tree order; the mean loss is summed in position order by one
// work-item (in f64 where the device has it). A sharded cross_entropy combines its shards over the
// group on the host (combine_vocab_shards: the collectives take host memory), so it copies lse and the
// target logits there and back once per call when the group has more than one rank.
#include <fmt/format.h>

#include "backends/opencl/cl_common.h"
#include "backends/opencl/launch.h"
#include "backends/opencl/opencl_ops.h"
#include "ops/collective_group.h"
#include "ops/vocab_shard.h"

namespace strata::opencl {

namespace {

constexpr size_t kRowThreads = 256;  // work-items per row of logits (a power of two: the tree halves it)
constexpr size_t kGroup = 256;

// INDEX (the ids' and targets' storage) comes from index_source, group_sum and `wide` from
// kRowReductionPrelude.
const std::string kVocabBody = R"CLC(
// `shard_rows` rows from `shard_start` of a vocabulary of `vocab_size`.
__kernel void embedding(__global const float* weight, ulong weight_off, __global const INDEX* ids, ulong ids_off,
                        __global float* out, ulong out_off, ulong channels, ulong count, long shard_start,
                        long shard_rows, long vocab_size) {
  const ulong i = get_global_id(0);
  if (i >= count) return;
  const long id = ids[ids_off + i / channels];
  const long row = id - shard_start;
  float value = 0.0f;
  if (id < 0 || id >= vocab_size) {
    value = NAN;
  } else if (row >= 0 && row < shard_rows) {
    value = weight[weight_off + (ulong)row * channels + i % channels];
  }
  out[out_off + i] = value;
}

// keys[i] = row << 32 | i for the positions whose id this shard holds; ULONG_MAX (sorted last) for the
// rest and for the padding up to a power of two.
__kernel void embedding_keys(__global const INDEX* ids, ulong ids_off, __global ulong* keys, ulong keys_off,
                             ulong positions, ulong padded, long shard_start, long shard_rows) {
  const ulong i = get_global_id(0);
  if (i >= padded) return;
  ulong key = ULONG_MAX;
  if (i < positions) {
    const long row = (long)ids[ids_off + i] - shard_start;
    if (row >= 0 && row < shard_rows) key = ((ulong)row << 32) | i;
  }
  keys[keys_off + i] = key;
}

// One compare-exchange pass (`stage`, `pass`) of a bitonic sort into ascending order.
__kernel void bitonic_pass(__global ulong* keys, ulong keys_off, ulong padded, ulong stage, ulong pass) {
  const ulong i = get_global_id(0);
  const ulong partner = i ^ pass;
  if (i >= padded || partner <= i) return;
  const ulong a = keys[keys_off + i], b = keys[keys_off + partner];
  const bool ascending = (i & stage) == 0;
  if ((a > b) == ascending) {
    keys[keys_off + i] = b;
    keys[keys_off + partner] = a;
  }
}

// first[row] and last[row] bound each held row's run of sorted keys (rows with none stay 0, 0).
__kernel void embedding_runs(__global const ulong* keys, ulong keys_off, ulong padded, __global ulong* first,
                             ulong first_off, __global ulong* last, ulong last_off) {
  const ulong i = get_global_id(0);
  if (i >= padded) return;
  const ulong key = keys[keys_off + i];
  if (key == ULONG_MAX) return;
  const ulong row = key >> 32;
  if (i == 0 || keys[keys_off + i - 1] >> 32 != row) first[first_off + row] = i;
  if (i + 1 == padded || keys[keys_off + i + 1] >> 32 != row) last[last_off + row] = i + 1;
}

// dweight[row, c] = the sum of dout[p, c] over the row's positions p, in position order.
__kernel void embedding_sum_runs(__global const float* dout, ulong dout_off, __global const ulong* keys,
                                 ulong keys_off, __global const ulong* first, ulong first_off,
                                 __global const ulong* last, ulong last_off, __global float* dweight,
                                 ulong dweight_off, ulong channels, ulong count) {
  const ulong i = get_global_id(0);
  if (i >= count) return;
  const ulong row = i / channels, c = i % channels;
  const ulong begin = first[first_off + row], end = last[last_off + row];
  float sum = 0.0f;
  for (ulong k = begin; k < end; ++k) {
    const float value = dout[dout_off + (keys[keys_off + k] & 0xffffffffUL) * channels + c];
    sum = k == begin ? value : sum + value;
  }
  dweight[dweight_off + i] = sum;
}

float group_max(float value, __local float* scratch) {
  const uint lid = get_local_id(0);
  scratch[lid] = value;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint half_size = ROW_THREADS / 2; half_size > 0; half_size /= 2) {
    if (lid < half_size) scratch[lid] = fmax(scratch[lid], scratch[lid + half_size]);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float largest = scratch[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return largest;
}

// One work-group per position: lse over the shard's `columns` logits, and the target's logit (0 when
// another shard holds the target).
__kernel void logsumexp_rows(__global const float* logits, ulong logits_off, __global const INDEX* targets,
                             ulong targets_off, __global float* lse, ulong lse_off, __global float* target_logit,
                             ulong target_logit_off, ulong columns, long shard_start, long vocab_size) {
  __local float scratch[ROW_THREADS];
  const uint lid = get_local_id(0);
  const ulong row = get_group_id(0);
  __global const float* values = logits + logits_off + row * columns;
  float largest = -INFINITY;
  for (ulong c = lid; c < columns; c += ROW_THREADS) largest = fmax(largest, values[c]);
  largest = group_max(largest, scratch);
  float sum = 0.0f;
  for (ulong c = lid; c < columns; c += ROW_THREADS) sum += exp(values[c] - largest);
  sum = group_sum(sum, scratch);
  if (lid != 0) return;
  lse[lse_off + row] = largest + log(sum);
  const long target = targets[targets_off + row];
  const long column = target - shard_start;
  float logit = 0.0f;
  if (target < 0 || target >= vocab_size) {
    logit = NAN;
  } else if (column >= 0 && column < (long)columns) {
    logit = values[column];
  }
  target_logit[target_logit_off + row] = logit;
}

// loss = the mean over positions of lse - target_logit, summed in position order.
__kernel void mean_loss(__global const float* lse, ulong lse_off, __global const float* target_logit,
                        ulong target_logit_off, ulong positions, __global float* loss, ulong loss_off) {
  if (get_global_id(0) != 0) return;
  wide total = 0;
  for (ulong p = 0; p < positions; ++p) {
    total += (wide)lse[lse_off + p] - (wide)target_logit[target_logit_off + p];
  }
  loss[loss_off] = (float)(total / (wide)positions);
}

// dlogits = dloss / positions * (softmax - onehot) over the shard's columns; may overwrite the logits.
__kernel void softmax_grad(__global const float* dloss, ulong dloss_off, __global const float* logits,
                           ulong logits_off, __global const INDEX* targets, ulong targets_off,
                           __global const float* lse, ulong lse_off, __global float* dlogits, ulong dlogits_off,
                           ulong columns, ulong positions, long shard_start, long vocab_size) {
  const ulong i = get_global_id(0);
  if (i >= positions * columns) return;
  const ulong row = i / columns;
  const float weight = (float)((wide)dloss[dloss_off] / (wide)positions);
  const long target = targets[targets_off + row];
  const float p = exp(logits[logits_off + i] - lse[lse_off + row]);
  float grad = (long)(i % columns) + shard_start == target ? weight * (p - 1.0f) : weight * p;
  if (target < 0 || target >= vocab_size) grad = NAN;
  dlogits[dlogits_off + i] = grad;
}
)CLC";

const std::string& index_source(const std::string& op, DType index) {
  static const std::string header = fmt::format("#define ROW_THREADS {}\n", kRowThreads);
  static const std::string body = kRowReductionPrelude + kVocabBody;
  static const std::string i32 = header + "#define INDEX int\n" + body;
  static const std::string i64 = header + "#define INDEX long\n" + body;
  switch (index) {
    case DType::I32: return i32;
    case DType::I64: return i64;
    default: fail("op '{}': ids and targets are i32 or i64, got {}", op, dtype_name(index));
  }
}

void embedding(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const VocabShard shard = vocab_shard("embedding", attrs, in[0].size(0));
  const size_t count = static_cast<size_t>(out[0].numel());
  Launch(out[0], index_source("embedding", in[1].dtype()), "embedding")
      .tensor(in[0]).tensor(in[1]).tensor(out[0]).value<cl_ulong>(static_cast<size_t>(in[0].size(1)))
      .value<cl_ulong>(count).value<cl_long>(shard.start).value<cl_long>(shard.rows).value<cl_long>(shard.size)
      .run(count, kGroup);
}

void embedding_backward(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const VocabShard shard = vocab_shard("embedding_backward", attrs, attrs.get_int("num_embeddings"));
  const Tensor& ids = in[1];
  const std::string& source = index_source("embedding_backward", ids.dtype());
  const size_t positions = static_cast<size_t>(ids.numel());
  STRATA_CHECK(positions < (size_t{1} << 32) && shard.rows < (int64_t{1} << 31),
               "op 'embedding_backward': the opencl kernel sorts keys of 32-bit rows and positions");
  size_t padded = 1;
  while (padded < positions) padded *= 2;
  const Device& device = out[0].device();
  const Tensor keys = Tensor::empty({static_cast<int64_t>(padded)}, DType::I64, device);
  const Tensor first = Tensor::zeros({shard.rows}, DType::I64, device);
  const Tensor last = Tensor::zeros({shard.rows}, DType::I64, device);
  Launch(keys, source, "embedding_keys")
      .tensor(ids).tensor(keys).value<cl_ulong>(positions).value<cl_ulong>(padded).value<cl_long>(shard.start)
      .value<cl_long>(shard.rows).run(padded, kGroup);
  for (size_t stage = 2; stage <= padded; stage *= 2) {
    for (size_t pass = stage / 2; pass > 0; pass /= 2) {
      Launch(keys, source, "bitonic_pass")
          .tensor(keys).value<cl_ulong>(padded).value<cl_ulong>(stage).value<cl_ulong>(pass).run(padded, kGroup);
    }
  }
  Launch(keys, source, "embedding_runs").tensor(keys).value<cl_ulong>(padded).tensor(first).tensor(last)
      .run(padded, kGroup);
  const size_t count = static_cast<size_t>(out[0].numel());
  Launch(out[0], source, "embedding_sum_runs")
      .tensor(in[0]).tensor(keys).tensor(first).tensor(last).tensor(out[0])
      .value<cl_ulong>(static_cast<size_t>(out[0].size(1))).value<cl_ulong>(count).run(count, kGroup);
}

// Whether a sharded cross_entropy has other ranks to combine with (or a group that does not match
// the graph, which combine_vocab_shards reports).
bool combines_over_group(const Attrs& attrs) {
  if (!attrs.has("group")) return false;
  return collective_group(attrs.get_string("group")).size() != 1 || attrs.get_int("ranks") != 1;
}

void cross_entropy(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const Tensor& logits = in[0];
  const VocabShard shard = vocab_shard("cross_entropy", attrs, logits.size(-1));
  const size_t positions = static_cast<size_t>(in[1].numel());
  if (positions == 0) {
    fail("op 'cross_entropy': logits {} have no positions to average over", shape_str(logits.shape()));
  }
  const std::string& source = index_source("cross_entropy", in[1].dtype());
  Tensor target_logit = Tensor::empty(in[1].shape(), DType::F32, logits.device());
  Launch(logits, source, "logsumexp_rows")
      .tensor(logits).tensor(in[1]).tensor(out[1]).tensor(target_logit)
      .value<cl_ulong>(static_cast<size_t>(shard.rows)).value<cl_long>(shard.start).value<cl_long>(shard.size)
      .run(positions * kRowThreads, kRowThreads);
  if (combines_over_group(attrs)) {
    Tensor lse_host = out[1].to_host(), target_logit_host = target_logit.to_host();
    combine_vocab_shards(attrs, lse_host.data<float>(), target_logit_host.data<float>(), positions);
    Tensor lse = out[1];  // a view of the output's buffer
    lse.copy_from(lse_host);
    target_logit.copy_from(target_logit_host);
  }
  Launch(logits, source, "mean_loss")
      .tensor(out[1]).tensor(target_logit).value<cl_ulong>(positions).tensor(out[0]).run(1);
}

void cross_entropy_backward(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const Tensor& logits = in[1];
  const VocabShard shard = vocab_shard("cross_entropy_backward", attrs, logits.size(-1));
  const size_t positions = static_cast<size_t>(in[2].numel());
  const size_t count = positions * static_cast<size_t>(shard.rows);
  Launch(logits, index_source("cross_entropy_backward", in[2].dtype()), "softmax_grad")
      .tensor(in[0]).tensor(logits).tensor(in[2]).tensor(in[3]).tensor(out[0])
      .value<cl_ulong>(static_cast<size_t>(shard.rows)).value<cl_ulong>(positions).value<cl_long>(shard.start)
      .value<cl_long>(shard.size).run(count, kGroup);
}

}  // namespace

void register_vocab(Backend& backend) {
  backend.add_kernel("embedding", DType::F32, embedding);
  backend.add_kernel("embedding_backward", DType::F32, embedding_backward);
  backend.add_kernel("cross_entropy", DType::F32, cross_entropy);
  backend.add_kernel("cross_entropy_backward", DType::F32, cross_entropy_backward);
}

}  // namespace strata::opencl
