#!/usr/bin/env python3
"""Runs one load against a running server and measures the server meanwhile.

    python3 bench/measure.py --pid SERVER_PID [--also NAME=PID]... [--timeout 300] [--tag K=V]... -- LOAD_COMMAND...

The load command (baton-load -json, or bench/socketio/load.js) prints a JSON
report with at least "events". This prints that report as one JSON line with
these added:

  server_cpu_s, server_cpu_us_per_event   utime+stime of SERVER_PID (all its
      threads) from /proc/PID/stat before and after the load
  server_syscw_per_event                  write syscalls (write, writev, ...)
      from /proc/PID/io's syscw before and after
  load_cpu_s, load_cpu_us_per_event       the load process's own CPU (rusage)
  others_cpu_s                            CPU the rest of the machine used
      meanwhile (/proc/stat busy time minus server and load): anything else
      running while the numbers were taken
  also_cpu_us_per_event                   {NAME: utime+stime of PID per event}
      for every --also (the redis-server processes of a Redis store, say)
  wall_s, load_exit
  K: V                                    for every --tag

CPU times come in clock ticks (usually 10 ms): a load should take server CPU
in the hundreds of ms or more for the per-event figures to hold 2 digits.
The load runs in its own process group and is killed at the timeout, which
is then reported as a violation.
"""

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid):
    """utime+stime of pid in seconds (fields 14 and 15 of /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def proc_syscw(pid):
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            if line.startswith("syscw:"):
                return int(line.split()[1])
    raise RuntimeError(f"no syscw in /proc/{pid}/io")


def machine_busy():
    """Busy CPU seconds of the whole machine so far: /proc/stat minus idle and iowait."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]  # user..steal; guest is inside user
    return (sum(v) - v[3] - v[4]) / TICK


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pid", type=int, required=True, help="the server's PID")
    ap.add_argument("--timeout", type=float, default=300, help="seconds the load may take")
    ap.add_argument("--tag", action="append", default=[], metavar="K=V", help="a field to add to the report")
    ap.add_argument("--also", action="append", default=[], metavar="NAME=PID", help="another process whose CPU per event to report")
    ap.add_argument("command", nargs="+", help="the load command")
    a = ap.parse_args()

    also = [(n, int(p)) for n, p in (x.split("=", 1) for x in a.also)]
    also0 = {n: proc_cpu(p) for n, p in also}
    cpu0, w0, busy0, t0 = proc_cpu(a.pid), proc_syscw(a.pid), machine_busy(), time.monotonic()
    load = subprocess.Popen(a.command, stdout=subprocess.PIPE, start_new_session=True)
    timed_out = False
    try:
        out, _ = load.communicate(timeout=a.timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(load.pid, signal.SIGKILL)
        out, _ = load.communicate()
    # communicate has reaped the load: its rusage is in RUSAGE_CHILDREN, which
    # holds nothing else of ours (one load per measure.py).
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu1, w1, busy1, t1 = proc_cpu(a.pid), proc_syscw(a.pid), machine_busy(), time.monotonic()
    also1 = {n: proc_cpu(p) for n, p in also}

    try:
        rep = json.loads(out)
    except ValueError:
        rep = {"events": 0, "violation_count": 1, "violations": ["the load printed no JSON report"]}
    if timed_out:
        rep["violation_count"] = rep.get("violation_count", 0) + 1
        rep.setdefault("violations", []).append(f"the load did not end within {a.timeout:.0f}s")
    events = max(rep.get("events", 0), 1)
    load_cpu = ru.ru_utime + ru.ru_stime
    also_cpu = sum(also1[n] - also0[n] for n, _ in also)
    if also:
        rep["also_cpu_us_per_event"] = {n: (also1[n] - also0[n]) * 1e6 / events for n, _ in also}
    rep.update(
        server_cpu_s=cpu1 - cpu0,
        server_cpu_us_per_event=(cpu1 - cpu0) * 1e6 / events,
        server_syscw_per_event=(w1 - w0) / events,
        load_cpu_s=load_cpu,
        load_cpu_us_per_event=load_cpu * 1e6 / events,
        others_cpu_s=max(0.0, (busy1 - busy0) - (cpu1 - cpu0) - load_cpu - also_cpu),
        wall_s=t1 - t0,
        load_exit=load.returncode,
    )
    rep.update(t.split("=", 1) for t in a.tag)
    json.dump(rep, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
