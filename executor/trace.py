"""`replay --profile --trace FILE`: the profiled steps as a Chrome trace (the Trace Event
Format that chrome://tracing and Perfetto open): one slice per launch, on one track per
step, named by the launch's node and its kernel."""

import json


def chrome_trace(profile, plan, path_name=""):
    """-> the trace as a dict: {"traceEvents": [...], "displayTimeUnit": "ms", ...}."""
    if not profile.events:
        return {"traceEvents": [], "displayTimeUnit": "ms"}
    t0 = min(start for _, _, start, _ in profile.events)
    events = [{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": f"aotplan {path_name}".strip()}}]
    for step in sorted({k for k, *_ in profile.events}):
        events.append({"name": "thread_name", "ph": "M", "pid": 1, "tid": step + 1,
                       "args": {"name": f"step {step}"}})
    for step, s, start, end in profile.events:
        if s >= 0:
            launch = plan.launches[s]
            name, kernel = launch.node, plan.kernels[launch.kernel].name
        else:
            name = kernel = "write_inputs" if s == -1 else "read_outputs"
        events.append({"name": name, "cat": "launch", "ph": "X", "pid": 1, "tid": step + 1,
                       "ts": round((start - t0) * 1e6, 3), "dur": round((end - start) * 1e6, 3),
                       "args": {"launch": s, "kernel": kernel}})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"launch_mode": plan.launch_mode, "median_step_ms": profile.step_ms}}


def write(path, trace):
    from aotplan.core.fileio import atomic_write

    atomic_write(path, json.dumps(trace).encode())
