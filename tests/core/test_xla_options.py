"""aotplan.core.xla_options: the XLA options kernels are compiled with, at build and on the host."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from aotplan.core import xla_options

pytestmark = pytest.mark.skipif(jax.devices()[0].platform != "cpu", reason="CPU options")


def _conv_lowered():
    f = lambda x, w: jax.nn.relu(jax.lax.conv(x, w, (1, 1), "SAME"))  # noqa: E731
    return jax.jit(f).lower(jnp.ones((1, 8, 12, 12)), jnp.ones((8, 8, 3, 3)))


def test_cpu_convolutions_and_dots_leave_ynnpack_and_give_the_same_numbers(monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    rng = np.random.default_rng(0)
    dot = jax.jit(lambda x, w: x @ w).lower(jnp.ones((8, 64)), jnp.ones((64, 32)))
    assert "ynn_fusion" in dot.compile().as_text()  # (XLA's default: the dot in YNNPACK)
    for low, shapes in ((_conv_lowered(), ((1, 8, 12, 12), (8, 8, 3, 3))), (dot, ((8, 64), (64, 32)))):
        ours = xla_options.compile(low, "cpu")
        assert "ynn_fusion" not in ours.as_text()
        x, w = (rng.standard_normal(s).astype(np.float32) for s in shapes)
        np.testing.assert_allclose(np.asarray(ours(x, w)), np.asarray(low.compile()(x, w)), rtol=1e-5, atol=1e-5)


def test_options_only_for_cpu_and_not_over_the_users_xla_flags(monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    assert xla_options.for_platform("cuda") == {}
    assert xla_options.for_platform("cpu") == xla_options.CPU
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_experimental_ynn_fusion_type=LIBRARY_FUSION_TYPE_DOT")
    assert "xla_cpu_experimental_ynn_fusion_type" not in xla_options.for_platform("cpu")  # the user's stands
    assert xla_options.for_platform("cpu") == {k: v for k, v in xla_options.CPU.items()
                                               if k != "xla_cpu_experimental_ynn_fusion_type"}
    monkeypatch.setenv("XLA_FLAGS", " ".join(f"--{k}=x" for k in xla_options.CPU))
    assert xla_options.for_platform("cpu") == {}


def test_a_jaxlib_that_refuses_the_option_compiles_without_it(monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    monkeypatch.setattr(xla_options, "CPU", {"xla_cpu_no_such_option_aotplan": "1"})
    monkeypatch.setattr(xla_options, "_rejected", set())
    compiled = xla_options.compile(_conv_lowered(), "cpu")
    assert compiled is not None and xla_options._rejected == {"cpu"}
    assert xla_options.for_platform("cpu") == {}


def test_the_build_and_the_host_both_compile_with_the_options(monkeypatch):
    """The compiler (workspace figures, embedded executables) and the executor (the
    StableHLO path) both go through xla_options.compile, for this host's platform; the
    host's conv kernel carries no YNNPACK fusion."""
    import executor
    from aotplan.core import codec, model_json
    from compiler import pipeline
    from conftest import one_node_graph

    monkeypatch.delenv("XLA_FLAGS", raising=False)
    seen, real = [], xla_options.compile
    monkeypatch.setattr(xla_options, "compile", lambda lowered, platform: seen.append(platform) or real(lowered, platform))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 4, 10, 10)).astype(np.float32)
    w = rng.standard_normal((4, 4, 3, 3)).astype(np.float32)
    graph = one_node_graph("conv", [("x", x)], [("w", w)], pads=[1, 1, 1, 1])
    plan = pipeline.compile_graph(graph, model_json.graph_digest(graph), pipeline.Options(launch="sink")).plan
    assert seen == ["cpu"] * len(seen) and seen  # the build compiled through the options
    built = len(seen)
    sess = executor.Session(codec.decode(codec.encode(plan)))
    assert len(seen) > built and set(seen) == {"cpu"}  # so did the host
    assert not any("ynn_fusion" in k.as_text() for k in sess._kernels.values())
    want = np.asarray(jax.lax.conv_general_dilated(x, w, (1, 1), [(1, 1), (1, 1)]))
    np.testing.assert_allclose(sess.run({"x": x})["y0"], want, rtol=1e-4, atol=1e-4)
