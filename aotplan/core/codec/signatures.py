"""Plan signatures: Ed25519 public-key signatures (`aotplan keygen`; the `cryptography`
package), and the HMAC-SHA256 shared-key signatures of earlier releases, still read.

A key is the bytes of its file. A PEM private key ("-----BEGIN PRIVATE KEY-----",
PKCS8) signs; a PEM public key ("-----BEGIN PUBLIC KEY-----") verifies, and cannot sign:
an inference host given the public key can check plans but not make them. Any other
key is an HMAC secret, which both signs and verifies (deprecated: every host that
verifies could sign native code). The header's signature says which by its length:
64 bytes Ed25519, 32 bytes HMAC-SHA256; the header itself is unchanged.
"""

import hashlib
import hmac
import warnings

from aotplan.core.errors import PlanError

ED25519_BYTES, HMAC_BYTES = 64, 32
_PRIVATE, _PUBLIC = b"-----BEGIN PRIVATE KEY-----", b"-----BEGIN PUBLIC KEY-----"
INSTALL = "pip install 'aotplan[sign]'"


# the DER prefix of an Ed25519 SubjectPublicKeyInfo (a public key in binary form)
_SPKI_ED25519 = bytes.fromhex("302a300506032b6570032100")


def kind(key):
    """-> "private" | "public" (Ed25519 PEM) | "hmac". A key that is any other public
    key form (PEM of another kind, OpenSSH, DER) is refused, never taken for an HMAC
    secret: whoever holds a public key could then sign."""
    key = bytes(key)
    head = key.removeprefix(b"\xef\xbb\xbf").lstrip()  # (a UTF-8 byte-order mark, as some editors save)
    if head.startswith(_PRIVATE):
        return "private"
    if head.startswith(_PUBLIC):
        return "public"
    if b"-----BEGIN" in key:
        first = head[head.find(b"-----BEGIN"):].splitlines()[0].decode(errors="replace")
        raise PlanError(f"key: a PEM file that is not an Ed25519 key in PKCS8/SubjectPublicKeyInfo form ({first}); "
                        f"make one with `aotplan keygen`")
    if head.startswith((b"ssh-", b"ecdsa-sha2-")) or key.startswith(_SPKI_ED25519):
        raise PlanError("key: a public key in OpenSSH or DER form; give the PEM files `aotplan keygen` writes")
    return "hmac"


def algorithm(signature):
    return {ED25519_BYTES: "Ed25519", HMAC_BYTES: "HMAC-SHA256"}.get(len(signature), "unknown")


def sign(key, message):
    k = kind(key)
    if k == "public":
        raise PlanError("--sign-key is a public key, which cannot sign: sign with its private key (aotplan keygen "
                        "writes both)")
    if k == "private":
        return _private(key).sign(message)
    warnings.warn("signing with a shared HMAC key is deprecated (every host that verifies could sign): make an "
                  "Ed25519 pair with `aotplan keygen`", FutureWarning, stacklevel=3)
    return hmac.new(key, message, hashlib.sha256).digest()


def verify(key, signature, message):
    """True if `signature` of `message` verifies with `key`; PlanError where the key and
    the signature are of different kinds (one message says which to use)."""
    k = kind(key)
    alg = algorithm(signature)
    if k == "private":
        raise PlanError("the trust key is a private key: give hosts the public key (aotplan keygen writes NAME.pub.pem);"
                        " a host that holds the private key could sign plans")
    if alg == "unknown":
        raise PlanError(f"plan header: a signature of {len(signature)} bytes is neither Ed25519 (64) nor HMAC-SHA256 "
                        f"(32)")
    if k == "public":
        if alg != "Ed25519":
            raise PlanError("plan is signed with a shared HMAC key, and the trust key is an Ed25519 public key: "
                            "re-sign the plan with the private key (compile --sign-key PRIVATE.pem)")
        from cryptography.exceptions import InvalidSignature

        try:
            _public(key).verify(signature, message)
            return True
        except InvalidSignature:
            return False
    if alg != "HMAC-SHA256":
        raise PlanError("plan is signed with Ed25519, and the trust key is a shared HMAC key: give its public key")
    warnings.warn("this plan is signed with a shared HMAC key, which is deprecated: re-sign it with an Ed25519 "
                  "private key (aotplan keygen) and trust the public key", FutureWarning, stacklevel=3)
    return hmac.compare_digest(signature, hmac.new(key, message, hashlib.sha256).digest())


def _crypto():
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise PlanError(f"Ed25519 keys need the cryptography package: {INSTALL}") from None
    return serialization, ed25519


def _private(key):
    serialization, ed25519 = _crypto()
    try:
        k = serialization.load_pem_private_key(bytes(key).removeprefix(b"\xef\xbb\xbf"), password=None)
    except (ValueError, TypeError) as e:
        raise PlanError(f"signing key: not a readable PEM private key ({e})") from None
    if not isinstance(k, ed25519.Ed25519PrivateKey):
        raise PlanError(f"signing key: a {type(k).__name__.replace('_', '')}, not Ed25519 (aotplan keygen makes one)")
    return k


def _public(key):
    serialization, ed25519 = _crypto()
    try:
        k = serialization.load_pem_public_key(bytes(key).removeprefix(b"\xef\xbb\xbf"))
    except (ValueError, TypeError) as e:
        raise PlanError(f"trust key: not a readable PEM public key ({e})") from None
    if not isinstance(k, ed25519.Ed25519PublicKey):
        raise PlanError(f"trust key: a {type(k).__name__.replace('_', '')}, not Ed25519 (aotplan keygen makes one)")
    return k


def keypair():
    """-> (private PEM bytes, public PEM bytes) of a new Ed25519 key."""
    serialization, ed25519 = _crypto()
    k = ed25519.Ed25519PrivateKey.generate()
    private = k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption())
    public = k.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return private, public
