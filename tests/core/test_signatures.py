"""Ed25519 plan signatures (aotplan/core/codec/signatures.py, `aotplan keygen`): a host
with the public key verifies and cannot sign; each wrong key is one clear error; plans
signed with an HMAC key still load, with a deprecation note."""

import os
import subprocess
import sys
import warnings

import pytest

from aotplan.core import codec
from aotplan.core.codec import signatures
from aotplan.core.errors import PlanError

pytest.importorskip("cryptography")


def run(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "aotplan.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=600)


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    d = tmp_path_factory.mktemp("keys")
    for name in ("build", "other"):
        r = run("keygen", str(d / name))
        assert r.returncode == 0, r.stderr
    return {"private": str(d / "build.pem"), "public": str(d / "build.pub.pem"),
            "other_public": str(d / "other.pub.pem"), "dir": d}


@pytest.fixture(scope="module")
def mlp_plan(examples):
    return examples["mlp"][1]


def test_keygen_writes_a_private_key_for_its_owner_alone_and_never_replaces_one(keys):
    assert os.stat(keys["private"]).st_mode & 0o777 == 0o600
    assert open(keys["private"], "rb").read().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert open(keys["public"], "rb").read().startswith(b"-----BEGIN PUBLIC KEY-----")
    r = run("keygen", str(keys["dir"] / "build"))
    assert r.returncode == 2 and "never replaces a key" in r.stderr


def test_signed_with_the_private_key_verified_with_the_public_one(keys, mlp_plan):
    data = codec.encode(mlp_plan, sign_key=codec.read_key(keys["private"]))
    header, _, _, trusted = codec.split(data, codec.read_key(keys["public"]), require_signature=True)
    assert trusted and len(header["signature"]) == 64 and signatures.algorithm(header["signature"]) == "Ed25519"
    tampered = bytearray(data)
    tampered[-1] ^= 1  # (a byte of the data section: the digest catches it first)
    with pytest.raises(PlanError, match="digest mismatch|corrupt"):
        codec.split(bytes(tampered), codec.read_key(keys["public"]))


@pytest.mark.parametrize("case, says", [
    ("another key's public key", "does not verify with the trusted key"),
    ("the private key as trust key", "the trust key is a private key: give hosts the public key"),
    ("a public key to sign", "is a public key, which cannot sign"),
    ("a truncated key file", "not a readable PEM private key"),
    ("an RSA key", "not an Ed25519 key"),
])
def test_each_wrong_key_is_one_clear_error(keys, mlp_plan, tmp_path, case, says):
    signed = codec.encode(mlp_plan, sign_key=codec.read_key(keys["private"]))
    with pytest.raises(PlanError, match=None) as e:
        if case == "another key's public key":
            codec.split(signed, codec.read_key(keys["other_public"]))
        elif case == "the private key as trust key":
            codec.split(signed, codec.read_key(keys["private"]))
        elif case == "a public key to sign":
            codec.encode(mlp_plan, sign_key=codec.read_key(keys["public"]))
        elif case == "a truncated key file":
            codec.encode(mlp_plan, sign_key=open(keys["private"], "rb").read()[:80])
        else:
            codec.encode(mlp_plan, sign_key=b"-----BEGIN RSA PRIVATE KEY-----\nMIIB...\n-----END RSA PRIVATE KEY-----\n")
    assert says in str(e.value)


def test_public_keys_in_other_forms_are_never_taken_for_hmac_secrets(keys, mlp_plan):
    public = open(keys["public"], "rb").read()
    signed = codec.encode(mlp_plan, sign_key=codec.read_key(keys["private"]))
    assert codec.split(signed, b"\xef\xbb\xbf" + public)[3] is True  # (a byte-order mark before the PEM)
    from cryptography.hazmat.primitives import serialization

    k = serialization.load_pem_public_key(public)
    for form in (k.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH),
                 k.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)):
        with pytest.raises(PlanError, match="a public key in OpenSSH or DER form"):
            codec.split(signed, form)
        with pytest.raises(PlanError, match="a public key in OpenSSH or DER form"):
            codec.encode(mlp_plan, sign_key=form)


def test_the_commands_sign_and_check(keys, tmp_path):
    from conftest import ROOT

    plan = str(tmp_path / "mlp.plan")
    model = os.path.join(ROOT, "plans", "examples", "mlp", "model.json")
    assert run("compile", model, "-o", plan, "--sign-key", keys["private"]).returncode == 0
    r = run("replay", plan, "--random-inputs", "--steps", "1", "--trust-key", keys["public"], "--require-signature")
    assert r.returncode == 0, r.stderr
    r = run("inspect", plan, "--trust-key", keys["public"])
    assert "signature: Ed25519, verified with the trust key" in r.stdout
    r = run("replay", plan, "--random-inputs", "--trust-key", keys["other_public"])
    assert r.returncode == 2 and "does not verify" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_hmac_plans_still_load_with_a_deprecation_note(mlp_plan, tmp_path):
    key = b"k" * 32
    with pytest.warns(FutureWarning, match="shared HMAC key is deprecated"):
        data = codec.encode(mlp_plan, sign_key=key)
    with pytest.warns(FutureWarning, match="signed with a shared HMAC key, which is deprecated"):
        assert codec.split(data, key)[3] is True
    path, keyfile = tmp_path / "h.plan", tmp_path / "hkey"
    path.write_bytes(data)
    keyfile.write_bytes(key)
    r = run("replay", str(path), "--random-inputs", "--steps", "1", "--trust-key", str(keyfile))
    assert r.returncode == 0 and r.stderr.count("note: this plan is signed with a shared HMAC key") == 1, r.stderr
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(PlanError, match="signed with a shared HMAC key, and the trust key is an Ed25519"):
            codec.split(data, signatures.keypair()[1])
