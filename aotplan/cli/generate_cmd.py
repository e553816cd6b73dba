"""`aotplan generate`: greedy decoding with a plan that keeps its KV cache as state.

The plan is a decoder step of one token: it takes token ids (int[1, 1]) and the
token's position (int[1]), returns logits (float[1, 1, vocab]), and keeps its cache
on the device (`compile --state`). The prompt is fed first (the prefill), then each
next token is the argmax of the last logits (greedy), one step each.

A plan of several methods (`compile --method prefill=... --method decode=...`) runs
its decode method (`--decode-method`) a token a step and its prefill method
(`--prefill-method`, a step of P tokens) on the prompt: its first P tokens in one
step, right-padded with token 0 when the prompt is shorter (safe for a causal
decoder: a padded position's key and value are overwritten by the step that first
attends to it), the rest a token a step. A plan of one method feeds the prompt a
token a step.
"""

import time

import click
import numpy as np

from aotplan.core.errors import AotplanError
from aotplan.cli.app import Path, handle_errors, main, memory_option, trust_options


def _token_list(ctx, param, value):
    try:
        tokens = [int(t) for t in value.split(",") if t.strip()]
    except ValueError:
        raise click.BadParameter(f"{value!r}: expected token ids separated by commas, e.g. 1,2,3") from None
    if not tokens or any(t < 0 for t in tokens):
        raise click.BadParameter(f"{value!r}: expected one or more token ids >= 0")
    return tokens


def _spec(specs, name, kind, flag):
    found = {n: (dt, tuple(shape)) for n, dt, shape in specs}
    if name not in found:
        raise AotplanError(f"{flag} {name}: the plan has no {kind} {name!r} (its {kind}s: {', '.join(found) or 'none'})")
    return found[name]


def capacity(session):
    """The cache length: the second-to-last axis its states share (KV caches are laid
    out [batch, heads, positions, head dim]); None where they do not share one."""
    lengths = {shape[-2] for _, _, shape in session.state_specs if len(shape) >= 2}
    return lengths.pop() if len(lengths) == 1 else None


def _prefill_width(session, tokens_input, position_input, logits_output, name):
    """The prefill method's tokens a step, its inputs and output checked as the decode
    method's are."""
    tok = dict((n, (dt, tuple(shape))) for n, dt, shape in session.input_specs)
    if set(tok) != {tokens_input, position_input} or len(tok[tokens_input][1]) != 2 \
            or tok[position_input][1] != (1,) or logits_output not in {n for n, _, _ in session.output_specs}:
        raise AotplanError(f"method {name!r} does not take {tokens_input!r} int[1, P] and {position_input!r} int[1] "
                           f"to return {logits_output!r} (its inputs: "
                           + ", ".join(f"{n} {dt}{list(sh)}" for n, (dt, sh) in tok.items()) + ")")
    return tok[tokens_input][1][1]


@main.command()
@click.argument("plan_path", metavar="PLAN", type=Path(dir_okay=False))
@click.option("--prompt", required=True, callback=_token_list, metavar="IDS",
              help="The prompt's token ids, comma-separated (e.g. 1,2,3).")
@click.option("--tokens", "n_new", default=16, show_default=True, type=click.IntRange(min=1),
              help="How many tokens to generate after the prompt.")
@click.option("--tokens-input", default="tokens", show_default=True, metavar="NAME",
              help="The plan's input of token ids, int[1, 1].")
@click.option("--position-input", default="position", show_default=True, metavar="NAME",
              help="The plan's input of the first token's position, int[1].")
@click.option("--logits-output", default="logits", show_default=True, metavar="NAME",
              help="The plan's output of logits, float[1, 1, vocab].")
@click.option("--decode-method", default="decode", show_default=True, metavar="NAME",
              help="A plan of several methods: the one that decodes a token a step.")
@click.option("--prefill-method", default="prefill", show_default=True, metavar="NAME",
              help="A plan of several methods: the one that takes the prompt (if it has one).")
@memory_option
@trust_options
@handle_errors
def generate(plan_path, prompt, n_new, tokens_input, position_input, logits_output, decode_method, prefill_method,
             max_memory, trust_key, require_signature, trust_executables, cache_dir):
    """Greedy decoding with PLAN, a decoder step that keeps its KV cache on the device:
    feed the prompt, then generate --tokens tokens; print them and the tokens/s."""
    from aotplan.cli.replay_cmd import load_session

    loaded = load_session(plan_path, trust_key, require_signature, trust_executables, cache_dir,
                          max_memory=max_memory)
    methods = loaded.methods
    prefill = None
    if len(methods) > 1:
        if decode_method not in methods:
            raise AotplanError(f"--decode-method {decode_method}: {plan_path} has no method {decode_method!r} (its "
                               f"methods: {', '.join(methods)})")
        session, prefill = methods[decode_method], methods.get(prefill_method)
        if prefill is None and click.get_current_context().get_parameter_source("prefill_method").name == \
                "COMMANDLINE":
            raise AotplanError(f"--prefill-method {prefill_method}: {plan_path} has no method {prefill_method!r} "
                               f"(its methods: {', '.join(methods)})")
    else:
        session = loaded
    if not session.state_specs:
        raise AotplanError(f"{plan_path} keeps no state: generate needs a decoder step that keeps its KV cache on "
                           f"the device (compile it with --state OUT=IN for each cache output and input)")
    tok_dtype, tok_shape = _spec(session.input_specs, tokens_input, "input", "--tokens-input")
    pos_dtype, pos_shape = _spec(session.input_specs, position_input, "input", "--position-input")
    logits_dtype, logits_shape = _spec(session.output_specs, logits_output, "output", "--logits-output")
    if len(tok_shape) != 2 or tok_shape[0] != 1 or pos_shape != (1,) or "int" not in tok_dtype \
            or "int" not in pos_dtype:
        raise AotplanError(f"generate takes a step of int[1, 1] token ids ({tokens_input!r} is "
                           f"{tok_dtype}{list(tok_shape)}) and an int[1] position ({position_input!r} is "
                           f"{pos_dtype}{list(pos_shape)})")
    if len(session.input_specs) != 2:
        others = [n for n, _, _ in session.input_specs if n not in (tokens_input, position_input)]
        raise AotplanError(f"generate feeds only {tokens_input!r} and {position_input!r}; {plan_path} also takes "
                           f"{', '.join(repr(n) for n in others)}")
    if tok_shape[1] != 1:
        raise AotplanError(f"{plan_path} takes {tok_shape[1]} tokens a step (a prefill step): generate decodes "
                           f"a token a step, with a plan of the decode step (int[1, 1] token ids)")
    if len(logits_shape) != 3 or logits_shape[:2] != (1, 1):
        raise AotplanError(f"generate takes a step that returns float[1, 1, vocab] logits ({logits_output!r} is "
                           f"{logits_dtype}{list(logits_shape)})")
    vocab = logits_shape[2]
    bad = next((t for t in prompt if t >= vocab), None)
    if bad is not None:
        raise AotplanError(f"--prompt: token id {bad} is outside the vocabulary of {vocab} (the logits' last "
                           f"dimension)")
    limit = capacity(session)
    # (the last token generated is not fed: the prompt and all but one new token take positions)
    if limit is not None and len(prompt) + n_new - 1 > limit:
        raise AotplanError(f"a prompt of {len(prompt)} tokens and {n_new} more need {len(prompt) + n_new - 1} "
                           f"positions; the cache holds {limit}")

    def step(tokens, position):
        feeds = {tokens_input: np.asarray([tokens], np.dtype(tok_dtype)),
                 position_input: np.asarray([position], np.dtype(pos_dtype))}
        return session.run(feeds)[logits_output][0, -1]

    session.reset_state()
    t0 = time.perf_counter()
    done, how = 0, f"{len(prompt)} steps"
    if prefill is not None:
        width = _prefill_width(prefill, tokens_input, position_input, logits_output, prefill_method)
        head = prompt[:width]
        feeds = {tokens_input: np.asarray([head + [0] * (width - len(head))], np.dtype(tok_dtype)),
                 position_input: np.zeros((1,), np.dtype(pos_dtype))}
        got = prefill.run(feeds)[logits_output]
        if got.shape != (1, width, vocab):
            raise AotplanError(f"method {prefill_method!r} returns {logits_output!r} of shape {list(got.shape)}, not "
                               f"the logits of each of its {width} tokens ({[1, width, vocab]})")
        logits = got[0, len(head) - 1]
        done = len(head)
        how = f"{prefill_method!r} on {len(head)} tokens" + (f" padded to {width}" if len(head) < width else "") + (
            f", then {len(prompt) - done} steps" if len(prompt) > done else "")
    for p in range(done, len(prompt)):
        logits = step([prompt[p]], p)
    prefill_s = time.perf_counter() - t0
    out = []
    t0 = time.perf_counter()
    for i in range(n_new):
        out.append(int(np.argmax(logits)))
        if i + 1 < n_new:
            logits = step([out[-1]], len(prompt) + i)
    decode = time.perf_counter() - t0
    click.echo(f"prompt: {','.join(map(str, prompt))}")
    click.echo(f"generated: {','.join(map(str, out))}")
    rate = (n_new - 1) / decode if n_new > 1 and decode > 0 else float("nan")
    click.echo(f"prefill: {len(prompt)} tokens in {prefill_s * 1e3:.2f} ms ({how}); decode: {n_new} tokens, "
               f"{rate:.1f} tokens/s ({decode / max(n_new - 1, 1) * 1e3:.3f} ms a token)")
