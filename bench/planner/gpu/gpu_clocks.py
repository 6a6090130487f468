"""The GPU's SM clock, power draw and temperature from nvidia-smi: one reading (smi), or readings taken in the
background while a measurement runs (ClockSampler), so a rate can be read against the clock it ran at.
Standard library only; without nvidia-smi (a CPU smoke run) the readings say why they are missing."""
import statistics
import subprocess
import threading


def smi():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10)
        sm, power, temp = (float(x) for x in out.stdout.strip().split(","))
        return {"sm_mhz": sm, "power_w": power, "temp_c": temp}
    except Exception as error:  # no nvidia-smi, or it answered nothing readable: keep the measurement
        return {"error": str(error)}


class ClockSampler:
    """`with ClockSampler() as clocks:` reads smi() every `period_s` until the block ends; clocks.summary() gives
    each figure's median, minimum and maximum over the readings."""

    def __init__(self, period_s=0.1):
        self.period_s = period_s
        self.readings = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.readings.append(smi())
            self._stop.wait(self.period_s)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        return False

    def summary(self):
        good = [r for r in self.readings if "error" not in r]
        if not good:
            return {"readings": 0, "error": self.readings[0]["error"] if self.readings else "no reading taken"}
        result = {"readings": len(good)}
        for key in ("sm_mhz", "power_w", "temp_c"):
            values = [r[key] for r in good]
            result[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
        return result
