"""Plans with state: the example decoder's KV cache kept on the device across steps
gives what the stateless model gives with its cache carried on the host (onnxruntime,
and the direct reference evaluation), in every launch mode; a step moves no state
bytes and allocates nothing; the state API (reset, get, set) and its errors."""

import jax
import numpy as np
import pytest

import executor
from aotplan.core import codec
from aotplan.core.errors import FeedError
from compiler import reference
from decoder_model import (
    CACHE_SHAPE, OrtStateless, build, compile_plan, feeds, stateful_graph, write_onnx, zero_cache,
)

MODES = ("sink", "fused", "kernel")


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    """{"paths": the ONNX steps, "graph"/"digest": the decode step with its cache as
    state, "plans": {mode: plan bytes}, "prefill": the prefill step's sink plan}."""
    paths = write_onnx(str(tmp_path_factory.mktemp("decoder")))
    graph, digest = stateful_graph(paths["decode"])
    plans = {mode: compile_plan(graph, digest, launch=mode) for mode in MODES}
    prefill = compile_plan(*stateful_graph(paths["prefill"]), launch="sink")
    return {"paths": paths, "graph": graph, "digest": digest, "plans": plans, "prefill": prefill}


def test_a_stateful_plan_is_format_7_and_a_stateless_one_stays_format_6(decoder, examples):
    assert codec.version_of(codec.decode(decoder["plans"]["sink"])) == 7
    assert int.from_bytes(decoder["plans"]["sink"][8:12], "little") == 7
    plan = examples["mlp"][1]
    assert codec.version_of(plan) == 6 and int.from_bytes(codec.encode(plan)[8:12], "little") == 6


@pytest.mark.parametrize("mode", MODES)
def test_greedy_decoding_matches_onnxruntime_with_the_cache_on_the_host(decoder, mode):
    sess = executor.load(decoder["plans"][mode])
    ort = OrtStateless(decoder["paths"]["decode"])
    token, ours, theirs = 1, [], []
    for position in range(12):
        got = sess.run(feeds([token], position))["logits"]
        want = ort.step([token], position)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        ours.append(int(got.argmax()))
        theirs.append(int(want.argmax()))
        token = ours[-1]
    assert ours == theirs
    for _, past in build.cache_names():  # the cache on the device is the one onnxruntime carried
        np.testing.assert_allclose(sess.get_state(past), ort.cache[past], rtol=1e-4, atol=1e-6)


def test_decoding_matches_the_direct_evaluation_of_the_stateless_graph(decoder):
    sess = executor.load(decoder["plans"]["kernel"])
    graph, cache = decoder["graph"], zero_cache()
    for position, token in enumerate([3, 17, 5, 60, 2]):
        got = sess.run(feeds([token], position))["logits"]
        want = reference.evaluate(graph, {**feeds([token], position), **cache})
        np.testing.assert_allclose(got, want["logits"], rtol=1e-4, atol=1e-5)
        for present, past in build.cache_names():
            cache[past] = want[present]


def test_prefill_then_decode_equals_decoding_the_prompt_token_by_token(decoder):
    prompt = [5, 9, 2, 33, 7, 1, 60, 12]
    assert len(prompt) == build.PROMPT
    one = executor.load(decoder["plans"]["sink"])
    by_token = [one.run(feeds([t], p))["logits"][0, 0] for p, t in enumerate(prompt)]
    pre = executor.load(decoder["prefill"])
    prefilled = pre.run(feeds(prompt, 0))["logits"][0]
    np.testing.assert_allclose(prefilled, np.stack(by_token), rtol=1e-4, atol=1e-5)
    two = executor.load(decoder["plans"]["sink"])
    for _, past in build.cache_names():  # the prefill's cache handed to the decode step
        two.set_state(past, pre.get_state(past))
    token_a = token_b = int(by_token[-1].argmax())
    for position in range(len(prompt), len(prompt) + 6):
        a = one.run(feeds([token_a], position))["logits"]
        b = two.run(feeds([token_b], position))["logits"]
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)
        token_a, token_b = int(a.argmax()), int(b.argmax())
        assert token_a == token_b


@pytest.mark.parametrize("mode", MODES)
def test_200_decode_steps_move_no_bytes_and_keep_every_buffer(decoder, mode):
    """The state and the arena keep their device addresses, the live arrays stay as
    many, and with device feeds and outputs no step transfers anything between host
    and device (jax's transfer guard refuses any transfer: the cache never leaves)."""
    sess = executor.load(decoder["plans"][mode])
    token = jax.device_put(np.array([[7]], np.int32), sess.device)  # (int64 is stored as int32)
    positions = [jax.device_put(np.array([p % build.CACHE], np.int32), sess.device) for p in range(200)]
    state, arena = sess.state_pointer(), sess.arena_pointer()
    live = set()
    with jax.transfer_guard("disallow"):
        for p in range(200):
            out = sess.run({"tokens": token, "position": positions[p]}, device_outputs=True)
            jax.block_until_ready(out)
            del out
            if p >= 2:
                live.add(len(jax.live_arrays()))
            assert sess.state_pointer() == state and sess.arena_pointer() == arena
    assert len(live) == 1, live


def test_the_state_api(decoder):
    sess = executor.load(decoder["plans"]["fused"])
    names = [past for _, past in build.cache_names()]
    assert [n for n, _, _ in sess.state_specs] == names
    assert all(dt == "float32" and tuple(shape) == CACHE_SHAPE for _, dt, shape in sess.state_specs)
    assert "past_key_0" not in {n for n, _, _ in sess.input_specs}
    for n in names:  # the warm-up step at load left no trace
        assert not sess.get_state(n).any()
    sess.run(feeds([4], 0))
    assert sess.get_state("past_key_0")[0, :, 0].any() and not sess.get_state("past_key_0")[0, :, 1:].any()
    value = np.random.default_rng(0).standard_normal(CACHE_SHAPE).astype(np.float32)
    pointer = sess.state_pointer()
    sess.set_state("past_value_1", value)
    np.testing.assert_array_equal(sess.get_state("past_value_1"), value)
    sess.reset_state()
    assert not any(sess.get_state(n).any() for n in names)
    assert sess.state_pointer() == pointer
    with pytest.raises(FeedError, match="'past_key_0' is a state of the plan: it stays on the device"):
        sess.run({**feeds([4], 0), "past_key_0": value})
    with pytest.raises(FeedError, match=r"state 'past_key_0': expected float32\[1, 2, 32, 16\], got float64"):
        sess.set_state("past_key_0", value.astype(np.float64))
    with pytest.raises(FeedError, match=r"state 'past_key_0': expected float32\[1, 2, 32, 16\], got float32\[2\]"):
        sess.set_state("past_key_0", np.zeros(2, np.float32))
    with pytest.raises(FeedError, match="no state named 'cache'.*'past_key_0'"):
        sess.get_state("cache")


def test_int64_feeds_are_narrowed_on_the_fast_path_and_refused_out_of_range(decoder):
    """int64 token ids and positions (stored as int32): a value that fits takes the
    plain-feed path (the same answer as int32 feeds); one that does not is named."""
    from aotplan.core.errors import FeedLimitError

    sess = executor.load(decoder["plans"]["sink"])
    a = sess.run(feeds([9], 3))["logits"]
    sess.reset_state()
    b = sess.run({"tokens": np.array([[9]], np.int32), "position": np.array([3], np.int32)})["logits"]
    np.testing.assert_array_equal(a, b)
    with pytest.raises(FeedLimitError, match=r"input 'position': int64 value 4294967296 is outside the int32 range"):
        sess.run(feeds([9], 1 << 32))


def test_native_executables_update_the_state_in_place_too(decoder):
    """A trusted plan's embedded executables: called from Python until adopted, then
    through jax's dispatch; the cache stays in place and the answers are the portable
    kernels' on either path."""
    data = compile_plan(decoder["graph"], decoder["digest"], launch="fused", embed_native=True)
    native = executor.load(data, trust_executables=True)
    portable = executor.load(decoder["plans"]["fused"])
    assert native.kernel_source == "native"
    pointer = native.state_pointer()
    for position, token in enumerate([4, 8, 15, 16, 23, 42]):
        if position == 3:
            assert native.wait_ready(60)
        np.testing.assert_allclose(native.run(feeds([token], position))["logits"],
                                   portable.run(feeds([token], position))["logits"], rtol=1e-5, atol=1e-6)
        assert native.state_pointer() == pointer


def test_a_step_stopped_between_state_updates_loses_the_states_until_reset(decoder):
    """A kernel-mode step whose later launches never run (here `after` raises after the
    first launch that updates a state) leaves some states advanced and others not: the
    session says so at the next step, and reset_state() starts over."""
    from aotplan.core.errors import PlanError

    sess = executor.load(decoder["plans"]["kernel"])
    first = next(s for s, l in enumerate(sess.plan.launches) if sess.plan.kernels[l.kernel].state)

    def stop(s, launch, arena):
        if s == first:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sess.run_launches(feeds([3], 0), stop)
    with pytest.raises(PlanError, match="lost its state .* between launches that update it\\): call reset_state"):
        sess.run(feeds([3], 0))
    sess.reset_state()
    want = executor.load(decoder["plans"]["kernel"]).run(feeds([3], 0))["logits"]
    np.testing.assert_array_equal(sess.run(feeds([3], 0))["logits"], want)


def test_a_plan_in_memory_with_an_initial_value_loads(tmp_path):
    """A Session of a compiled plan not written to a file (its constants are bytes, not
    views of a file) places a state's initial value too."""
    from aotplan.core import model_json
    from compiler import pipeline
    from state_model import accumulator

    graph, digest = model_json.load(accumulator(tmp_path))
    sess = executor.Session(pipeline.compile_graph(graph, digest, pipeline.Options(launch="fused")).plan)
    np.testing.assert_array_equal(sess.get_state("acc"), [0, 1, 2, 3])
    np.testing.assert_array_equal(sess.run({"x": np.ones(4, np.float32)})["y"], [2, 4, 6, 8])
