"""What a process tree costs, read from /proc: peak RSS and CPU seconds, and what the rest of
the machine was doing meanwhile (load average, other processes' busy cores).

On a shared machine a side's wall-clock rate depends on what else runs at that moment; its
CPU seconds per record much less so. `TreeStats` samples a process and its descendants every
`interval` seconds (and on `sample()`): CPU is the sum over every process ever seen in the
tree of its last-read user+system time (a process that exits between two samples loses at
most its last interval; its parent's cutime is not added, which would count it twice).
"""

from __future__ import annotations

import os
import threading
import time
from typing import NamedTuple

TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


class ProcStat(NamedTuple):
    ppid: int
    cpu: float  # user + system seconds of the process itself
    started: int  # start time in ticks after boot (with the pid, a process's identity)
    rss: int  # bytes


def read_stat(pid: int) -> ProcStat | None:
    """/proc/<pid>/stat's parent, CPU seconds, start time and RSS; None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # after the command, which may hold spaces
    # fields[0] is the state (stat's field 3): utime, stime are fields 14, 15; starttime 22; rss 24
    return ProcStat(int(fields[1]), (int(fields[11]) + int(fields[12])) / TICKS, int(fields[19]),
                    int(fields[21]) * PAGE)


def machine_busy() -> float:
    """Seconds of CPU the whole machine has spent not idle (all cores, /proc/stat)."""
    with open("/proc/stat") as f:
        cpu = [int(x) for x in f.readline().split()[1:]]
    idle = cpu[3] + (cpu[4] if len(cpu) > 4 else 0)  # idle + iowait
    return (sum(cpu[:8]) - idle) / TICKS  # guest time is already in user


class Mark(NamedTuple):
    """The tree's CPU seconds and the machine's busy seconds at one moment."""

    wall: float
    cpu: float
    busy: float


class TreeStats(threading.Thread):
    """Peak summed RSS and cumulative CPU of process `pid` and its descendants, and the
    1-minute load averages seen while it ran."""

    def __init__(self, pid: int, interval: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.peak = 0
        self.loads: list[float] = []
        self.stop = threading.Event()
        self._cpu: dict[tuple[int, int], float] = {}  # (pid, start) -> last CPU seconds read
        self._lock = threading.Lock()

    def run(self) -> None:
        while not self.stop.wait(self.interval):
            self.sample()

    def sample(self) -> Mark:
        """Read the tree now; its CPU seconds so far (with the moment and the machine's)."""
        stats = {}
        for name in os.listdir("/proc"):
            if name.isdigit() and (stat := read_stat(int(name))) is not None:
                stats[int(name)] = stat
        children: dict[int, list[int]] = {}
        for pid, stat in stats.items():
            children.setdefault(stat.ppid, []).append(pid)
        tree, todo = [], [self.pid] if self.pid in stats else []
        while todo:
            pid = todo.pop()
            tree.append(pid)
            todo.extend(children.get(pid, ()))
        with self._lock:
            for pid in tree:
                self._cpu[pid, stats[pid].started] = stats[pid].cpu
            self.peak = max(self.peak, sum(stats[pid].rss for pid in tree))
            self.loads.append(os.getloadavg()[0])
            return Mark(time.time(), sum(self._cpu.values()), machine_busy())


def others_cores(first: Mark, last: Mark) -> float:
    """Cores the rest of the machine kept busy between two marks of a tree (everything but
    the tree: other users' jobs, and a broker or load generator outside it)."""
    wall = last.wall - first.wall
    return ((last.busy - first.busy) - (last.cpu - first.cpu)) / wall if wall > 0 else float("nan")
