"""The subscription API's keys: the webhook signing key, its key set, and the wake tokens (docs/protocol.md §13.6).

A notification carries ``Webhook-Signature: t=<unix seconds>,kid=<kid>,ed25519=<signature>``,
the base64url Ed25519 signature of ``<t>.<body>``; a receiver checks it against the key set
served at ``__ds/jwks.json``. A callback token is ``<claims>.<HMAC>``, both base64url, bound
to one subscription and one wake generation. Both keys are kept in the store, like the
subscriptions they sign for.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from typing import Final

import msgspec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat
from msgspec import Struct

from history_service.errors import WakeTokenExpired, WakeTokenInvalid

__all__ = ["Signer"]

_TOKEN_TTL_S: Final = 3600


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class _Jwk(Struct, frozen=True):
    kty: str
    crv: str
    x: str
    kid: str
    use: str
    alg: str


class _Jwks(Struct, frozen=True):
    keys: list[_Jwk]


class _Thumbprinted(Struct, frozen=True):
    """RFC 7638: the required members of an OKP key, in lexical order."""

    crv: str
    kty: str
    x: str


class _Claims(Struct, frozen=True):
    sub: list[str]
    epoch: int
    exp: int
    jti: str


_CLAIMS: Final = msgspec.json.Decoder(_Claims)


class _Keys(Struct, frozen=True, array_like=True):
    ed25519: bytes
    hmac: bytes


_KEYS: Final = msgspec.msgpack.Decoder(_Keys)


class Signer:
    """The webhook signing key (its key set in ``jwks``) and the callback-token key.

    Made from `Signer.new_keys` once and kept in the store, so every process of a store, and
    every life of one, signs and checks alike.
    """

    def __init__(self, keys: bytes) -> None:
        held = _KEYS.decode(keys)
        self._key = Ed25519PrivateKey.from_private_bytes(held.ed25519)
        self._hmac_key = held.hmac
        x = _b64url(self._key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))
        thumbprint = hashlib.sha256(msgspec.json.encode(_Thumbprinted(crv="Ed25519", kty="OKP", x=x))).digest()
        self.kid = f"ds_{_b64url(thumbprint)}"
        self.jwks = msgspec.json.encode(
            _Jwks(keys=[_Jwk(kty="OKP", crv="Ed25519", x=x, kid=self.kid, use="sig", alg="EdDSA")])
        )

    @staticmethod
    def new_keys() -> bytes:
        """New keys for `Signer`, encoded."""
        raw = Ed25519PrivateKey.generate().private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        return msgspec.msgpack.encode(_Keys(raw, secrets.token_bytes(32)))

    def sign(self, body: bytes) -> str:
        """The ``Webhook-Signature`` of ``body``, sent now."""
        stamp = int(time.time())
        signature = self._key.sign(b"%d." % stamp + body)
        return f"t={stamp},kid={self.kid},ed25519={_b64url(signature)}"

    def token(self, subject: list[str], epoch: int) -> str:
        """A callback token for ``subject`` (owner and subscription id) at wake generation ``epoch``."""
        claims = _Claims(sub=subject, epoch=epoch, exp=int(time.time()) + _TOKEN_TTL_S, jti=secrets.token_hex(8))
        payload = _b64url(msgspec.json.encode(claims))
        return f"{payload}.{self._mac(payload)}"

    def epoch(self, token: str, subject: list[str]) -> int:
        """The generation a token for ``subject`` was given at.

        Raises `WakeTokenInvalid` when it is not one of ours for ``subject``, `WakeTokenExpired` when it has expired.
        """
        claims = self._claims(token)
        if claims.sub != subject:
            raise WakeTokenInvalid("Token invalid")
        if time.time() > claims.exp:
            raise WakeTokenExpired("Token expired")
        return claims.epoch

    def owner(self, token: str) -> str:
        """The owner a callback token of ours was given for; `WakeTokenInvalid` when it is not one of ours."""
        subject = self._claims(token).sub
        if len(subject) != 2:
            raise WakeTokenInvalid("Token invalid")
        return subject[0]

    def _claims(self, token: str) -> _Claims:
        payload, dot, mac = token.partition(".")
        if not dot or not hmac.compare_digest(mac.encode(), self._mac(payload).encode()):
            raise WakeTokenInvalid("Token invalid")
        try:
            return _CLAIMS.decode(_unb64url(payload))
        except (ValueError, msgspec.DecodeError):
            raise WakeTokenInvalid("Token invalid") from None

    def _mac(self, payload: str) -> str:
        return _b64url(hmac.digest(self._hmac_key, payload.encode(), "sha256"))
