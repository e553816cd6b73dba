"""aotplan.xla_options: the XLA options kernels are compiled with, at build and on the host."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from aotplan import xla_options

pytestmark = pytest.mark.skipif(jax.devices()[0].platform != "cpu", reason="CPU options")


def _conv_lowered():
    f = lambda x, w: jax.nn.relu(jax.lax.conv(x, w, (1, 1), "SAME"))  # noqa: E731
    return jax.jit(f).lower(jnp.ones((1, 8, 12, 12)), jnp.ones((8, 8, 3, 3)))


def test_cpu_convolutions_leave_ynnpack_and_give_the_same_numbers(monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    low = _conv_lowered()
    ours = xla_options.compile(low, "cpu")
    assert "ynn_fusion" not in ours.as_text()
    x = np.random.default_rng(0).standard_normal((1, 8, 12, 12)).astype(np.float32)
    w = np.random.default_rng(1).standard_normal((8, 8, 3, 3)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(ours(x, w)), np.asarray(low.compile()(x, w)), rtol=1e-5, atol=1e-5)


def test_options_only_for_cpu_and_not_over_the_users_xla_flags(monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    assert xla_options.for_platform("cuda") == {}
    assert xla_options.for_platform("cpu") == xla_options.CPU
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_experimental_ynn_fusion_type=LIBRARY_FUSION_TYPE_DOT")
    assert xla_options.for_platform("cpu") == {}


def test_a_jaxlib_that_refuses_the_option_compiles_without_it(monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    monkeypatch.setattr(xla_options, "CPU", {"xla_cpu_no_such_option_aotplan": "1"})
    monkeypatch.setattr(xla_options, "_rejected", set())
    compiled = xla_options.compile(_conv_lowered(), "cpu")
    assert compiled is not None and xla_options._rejected == {"cpu"}
    assert xla_options.for_platform("cpu") == {}
