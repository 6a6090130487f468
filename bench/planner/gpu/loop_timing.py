"""A loop of calls timed as the GPU scripts here time them: on CUDA, a pair of events around the whole loop (device
time, no host sync inside it); on the CPU (their --smoke runs), the host clock. Returns the loop's seconds."""
import time

import torch


def loop_seconds(fn, reps, cuda):
    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    begin = time.perf_counter()
    for _ in range(reps):
        fn()
    return time.perf_counter() - begin
