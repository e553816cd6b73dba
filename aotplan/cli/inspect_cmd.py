"""`aotplan inspect`: a plan's tensors, launches, kernels and memory, as text or JSON.
"""

import hashlib
import json

import click

from aotplan.core.errors import AotplanError, PlanError
from aotplan.cli.app import Path, handle_errors, main
from aotplan.cli.text import plural


def plan_summary(plan, path):
    from aotplan.core.arena_lifetimes import per_tensor

    m, p = plan.memory, plan.provenance
    written = {j for l in plan.launches for j in l.writes}
    life = per_tensor(plan)
    return {
        "path": path, "launch_mode": plan.launch_mode, "weights": plan.weights, "planner": plan.planner,
        "passes": list(plan.passes),
        "alignment": plan.alignment,
        "memory": {"arena_bytes": m.arena_bytes, "lower_bound_bytes": m.lower_bound_bytes,
                   "plain_bound_bytes": m.plain_bound_bytes, "shared_bound_bytes": m.shared_bound_bytes,
                   "naive_bytes": m.naive_bytes, "constant_pool_bytes": m.constant_pool_bytes,
                   "inline_constant_bytes": m.inline_constant_bytes, "max_workspace_bytes": m.max_workspace_bytes,
                   "state_bytes": m.state_bytes,
                   "step_device_bytes": m.step_device_bytes,
                   "input_bytes": sum(plan.tensors[i].nbytes for i in plan.inputs),
                   "output_bytes": sum(plan.tensors[i].nbytes for i in plan.outputs)},
        "provenance": {"model_name": p.model_name, "model_digest": p.model_digest,
                       "aotplan_version": p.aotplan_version, "jax_version": p.jax_version,
                       "jaxlib_version": p.jaxlib_version, "platforms": list(p.platforms),
                       "native_fingerprint": p.native_fingerprint},
        "inputs": [plan.tensors[i].name for i in plan.inputs],
        "outputs": list(plan.output_names),
        "states": [{"name": st.name, "tensor": plan.tensors[st.tensor].name, "update": plan.tensors[st.update].name,
                    "dtype": plan.tensors[st.tensor].dtype, "shape": list(plan.tensors[st.tensor].shape),
                    "offset": plan.tensors[st.tensor].offset, "nbytes": plan.tensors[st.tensor].nbytes,
                    "initial": "constant" if any(c.tensor == st.tensor for c in plan.constants) else "zeros"}
                   for st in plan.states],
        "tensors": [{"name": t.name, "kind": t.kind, "dtype": t.dtype, "shape": list(t.shape), "format": t.format,
                     "device_shape": list(t.device_shape), "padding": list(t.padding), "storage": t.storage,
                     "offset": t.offset,
                     "nbytes": t.nbytes, "inside": plan.tensors[t.base].name if t.base >= 0 else None,
                     "shares": ("part" if i in written else "view") if t.base >= 0 else None,
                     "runs": t.runs, "stride": t.stride,
                     # (arena tensors: their bytes held from `first` up to `last`, in launches; launch s
                     # reads at s and writes at s + 0.5: aotplan/core/arena_lifetimes.py)
                     "first": life[i][0] if i in life else None, "last": life[i][1] if i in life else None}
                    for i, t in enumerate(plan.tensors)],
        # (sha256: the kernel's exported program, header included, to tell whether two
        # plans' kernels are the same program; the plan's digest and signature cover it)
        "kernels": [{"name": k.name, "bytes": len(k.exported), "sha256": hashlib.sha256(k.exported).hexdigest(),
                     "workspace_bytes": k.workspace_bytes,
                     "n_offsets": k.n_offsets, "feeds": k.feeds, "returns": k.returns, "state": k.state,
                     "native_bytes": len(k.native),
                     "launches": sum(1 for l in plan.launches if l.kernel == ki)}
                    for ki, k in enumerate(plan.kernels)],
        "launches": [{"label": l.node, "kernel": plan.kernels[l.kernel].name, "nodes": list(l.nodes),
                      "reads": [plan.tensors[i].name for i in l.reads],
                      "writes": [plan.tensors[i].name for i in l.writes]} for l in plan.launches],
        "method": plan.method,
        "methods": [plan_summary(m, path) for m in plan.methods],
    }


@main.command()
@click.argument("plan_path", metavar="PLAN", type=Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--plot", "plot_path", type=Path(dir_okay=False), metavar="FILE",
              help="Draw the arena over the step to FILE (.png, .svg, or .html with a table): every tensor a "
                   "rectangle (x: its lifetime in launches, y: its bytes), coloured by kind, the lower-bound curve "
                   "with its peak, and the step's device memory beside it. Needs pip install 'aotplan[plot]'.")
@click.option("--trust-key", type=Path(dir_okay=False), metavar="FILE",
              help="Check the plan's signature with the public key in FILE (Ed25519 PEM, from `aotplan keygen`; or "
                   "an older plan's HMAC key) (default: the file named by "
                   "AOTPLAN_TRUST_KEY); without a key a signature is shown, not checked.")
@handle_errors
def inspect(plan_path, as_json, plot_path, trust_key):
    """Show PLAN's tensors, launches and memory (reads and verifies it; runs nothing)."""
    from aotplan.core import codec, verify

    key, why_not, why_wrong = (codec.read_key(trust_key), "", "") if trust_key else (None, "", "")
    if not trust_key:
        try:
            key = codec.env_key()
        except AotplanError as e:  # shown, not fatal: inspect shows the plan whatever the key
            why_not = f": {e}"
    data = codec.read_bytes(plan_path)
    try:
        header = codec.split(data)[0]
        plan = verify.verify(codec.decode(data))
    except PlanError as e:
        raise codec.named(plan_path, e) from None
    s = plan_summary(plan, plan_path)
    if plan.methods:  # the device memory of all methods (one arena and state buffer, shared weights once)
        from executor.memory_limits import combined

        c = combined(plan)
        s["memory"].update(constant_pool_bytes=c.constant_pool_bytes, inline_constant_bytes=c.inline_constant_bytes,
                           max_workspace_bytes=c.max_workspace_bytes, step_device_bytes=c.step_device_bytes)
    from aotplan.core.codec import signatures

    if plan.mesh is not None:
        mesh = plan.mesh
        s["mesh"] = {"devices": mesh.devices, "parallel": mesh.parallel, "input_axes": list(mesh.input_axes),
                     "output_axes": list(mesh.output_axes)}
        if mesh.parallel == "tensor":
            T = plan.tensors
            s["mesh"].update(
                shardings=[{"tensor": T[sh.tensor].name, "kind": sh.kind, "axis": sh.axis} for sh in mesh.shardings],
                collectives=[{"op": c.op, "after_launch": c.after, "reads": [T[i].name for i in c.reads],
                              "writes": [T[i].name for i in c.writes], "axis": c.axis} for c in mesh.collectives])
    s["signature_algorithm"] = signatures.algorithm(header["signature"]) if header.get("signature") else None
    if header.get("signature") is None:
        s["signature"] = "none"
    elif key is None:
        s["signature"] = "not checked"
    else:
        try:
            codec.split(data, key)
            s["signature"] = "verified"
        except PlanError as e:
            s["signature"] = "does not verify"
            why_wrong = f" ({e})" if "does not verify" not in str(e) else ""
    if plot_path:
        from aotplan.cli import arena_plot
        from aotplan.core.fileio import refuse_overwriting

        refuse_overwriting(plot_path, {"plan": plan_path}, "--plot")
        rects = arena_plot.draw(plan, plot_path)
        if not as_json:  # (the picture is what was asked for: the listing stays for plain `inspect`)
            click.echo(f"arena picture of {plural(len(rects), 'tensor')} written to {plot_path}")
            return
    if as_json:
        click.echo(json.dumps(s, indent=1))
        return
    m, p = s["memory"], s["provenance"]
    click.echo(f"plan {plan_path}: model {p['model_name']!r} (digest {p['model_digest'][:12]}), "
               f"aotplan {p['aotplan_version']}, jax {p['jax_version']}, platforms {', '.join(p['platforms'])}")
    alg = s["signature_algorithm"]
    click.echo("signature: " + {
        "verified": f"{alg}, verified with the trust key", "none": "none (unsigned)",
        "not checked": f"{alg}, not checked (no --trust-key or AOTPLAN_TRUST_KEY{why_not})",
        "does not verify": f"{alg}, DOES NOT VERIFY with the trust key (changed after signing, or signed with "
                           f"another key){why_wrong}"}[s["signature"]])
    click.echo(f"launch mode {s['launch_mode']}, weights in {s['weights']}, planner {s['planner']}, "
               f"alignment {s['alignment']} B, passes {', '.join(s['passes']) or 'none'}")
    if "mesh" in s and s["mesh"]["parallel"] == "tensor":
        ms = s["mesh"]
        click.echo(f"devices: {ms['devices']} (tensor parallel: each holds its part of "
                   f"{plural(sum(1 for sh in ms['shardings'] if sh['kind'] == 'split'), 'split tensor')} and takes "
                   f"the whole inputs; the figures below are one device's)")
        for c in ms["collectives"]:
            click.echo(f"  collective {c['op']} after launch {c['after_launch']}: {', '.join(c['reads'])} -> "
                       f"{', '.join(c['writes'])}" + (f" (joined along axis {c['axis']})" if c["axis"] >= 0 else ""))
    elif "mesh" in s:
        click.echo(f"devices: {s['mesh']['devices']} ({s['mesh']['parallel']} parallel: each runs this plan on its "
                   f"slice of every input's first axis, with its own arena and weights; the figures below are one "
                   f"device's)")
    click.echo(f"device memory a step needs: {m['step_device_bytes']} B = arena {m['arena_bytes']} B + constant "
               f"pool {m['constant_pool_bytes']} B + "
               + (f"inline constants (in the kernels) {m['inline_constant_bytes']} B + "
                  if m["inline_constant_bytes"] else "")
               + (f"states {m['state_bytes']} B + " if m["state_bytes"] else "")
               + f"max workspace (XLA temp) {m['max_workspace_bytes']} B")
    click.echo(f"  per step also the inputs ({m['input_bytes']} B, staged) and outputs ({m['output_bytes']} B, "
               f"returned): {m['step_device_bytes'] + m['input_bytes'] + m['output_bytes']} B in all, the figure "
               f"`replay --check-alloc` holds the device's peak to")
    click.echo(f"  arena: lower bound {m['lower_bound_bytes']} B, naive {m['naive_bytes']} B; model bounds: plain "
               f"{m['plain_bound_bytes']} B, with sharing {m['shared_bound_bytes']} B")
    if p["native_fingerprint"]:
        click.echo(f"native executables for: {p['native_fingerprint']}")
    if s["states"]:
        click.echo(f"states ({len(s['states'])}, kept on the device across steps; never fed or returned):")
        for st in s["states"]:
            click.echo(f"  {st['name'][:28]:28s} {st['dtype']} {st['shape']} at byte {st['offset']} of the state "
                       f"buffer, updated by {st['update']!r}, initially {st['initial']}")
    formatted = [t for t in s["tensors"] if t["format"] != "default"]
    conversions = [l for l in s["launches"] for n in l["nodes"] if n.startswith("transdata:")]
    if formatted:
        click.echo(f"formats: {len(formatted)} tensors in {', '.join(sorted({t['format'] for t in formatted}))}; "
                   f"{plural(len(conversions), 'conversion')} (transdata nodes)")
    if s["methods"]:
        click.echo(f"methods ({len(s['methods']) + 1}, sharing the weights, the states and the arena; the first's "
                   f"tensors, launches and kernels below, `--json` has each one's):")
        for m in [s] + s["methods"]:
            t = {x["name"]: x for x in m["tensors"]}
            click.echo(f"  {m['method'][:24]:24s} {m['launch_mode']}, {plural(len(m['launches']), 'launch')}, "
                       f"{plural(len(m['kernels']), 'kernel')}; inputs "
                       + ", ".join(f"{n} {t[n]['dtype']}{t[n]['shape']}" for n in m["inputs"])
                       + "; outputs " + ", ".join(m["outputs"]))
    click.echo(f"tensors ({len(s['tensors'])}):")
    click.echo(f"  {'name':28s} {'kind':12s} {'dtype':9s} {'shape':18s} {'storage':7s} {'offset':>10s} {'nbytes':>10s}"
               + ("  format, device shape, padding" if formatted else ""))
    for t in s["tensors"]:
        fmt = ""
        if t["format"] != "default":
            fmt = f"  {t['format']} {t['device_shape']}" + (f" pad {t['padding']}" if any(t["padding"]) else "")
        click.echo(f"  {t['name'][:28]:28s} {t['kind']:12s} {t['dtype']:9s} {str(t['shape']):18s} {t['storage']:7s} "
                   f"{t['offset']:>10d} {t['nbytes']:>10d}" + fmt + _sharing(t))
    n_nodes = sum(len(l["nodes"]) for l in s["launches"])
    click.echo(f"launches ({len(s['launches'])}, running {plural(n_nodes, 'node')}):")
    for i, l in enumerate(s["launches"]):
        nodes = f" [{len(l['nodes'])} nodes]" if len(l["nodes"]) > 1 else ""
        click.echo(f"  {i:3d} {l['label'][:40]:40s} {l['kernel'][:24]:24s} {', '.join(l['reads'])} -> "
                   f"{', '.join(l['writes'])}{nodes}")
    click.echo(f"kernels ({len(s['kernels'])}):")
    for k in s["kernels"]:
        extra = (f", shared by {k['launches']} launches (runtime offsets)" if k["n_offsets"] else "") + (
            f", native {k['native_bytes']} B" if k["native_bytes"] else "")
        click.echo(f"  {k['name'][:32]:32s} {k['bytes']:>9d} B StableHLO (sha256 {k['sha256'][:12]}), "
                   f"workspace {k['workspace_bytes']} B{extra}")


def _sharing(t):
    if t["shares"] == "view":
        return f"  view of {t['inside']}"
    if t["shares"] == "part":
        runs = f", {t['runs']} runs {t['stride']} B apart" if t["runs"] > 1 else ""
        return f"  part of {t['inside']}{runs}"
    return ""
