"""The subscription API's refusals: the protocol's shape and code, the one error table's status."""

from __future__ import annotations

import msgspec
import pytest

from history_service.answers import ERRORS
from history_service.durable.subscription_bodies import refused
from history_service.errors import (
    InvalidAck,
    NoPendingWork,
    SubscriptionBodyTooLarge,
    SubscriptionExists,
    SubscriptionInvalid,
    SubscriptionLimit,
    SubscriptionNotFound,
    SubscriptionRefused,
    WakeClaimed,
    WakeFenced,
    WakeTokenExpired,
    WakeTokenInvalid,
    WebhookUrlRejected,
)

REFUSALS: list[SubscriptionRefused] = [
    SubscriptionNotFound("Subscription not found"),
    SubscriptionInvalid("streams must be a non-empty string array"),
    SubscriptionBodyTooLarge("the body exceeds 100 bytes"),
    WebhookUrlRejected("webhook.url must use https"),
    WakeTokenInvalid("Token invalid"),
    WakeTokenExpired("Token expired"),
    WakeFenced("Wake generation is stale"),
    SubscriptionExists("Subscription already exists with another configuration"),
    SubscriptionLimit("too many subscriptions: delete one first"),
    NoPendingWork("Subscription has no pending work"),
    InvalidAck("Ack offset is beyond stream tail"),
]


def test_every_refusal_of_the_api_is_listed_here() -> None:
    def leaves(cls: type[SubscriptionRefused]) -> set[type[SubscriptionRefused]]:
        return {cls}.union(*(leaves(sub) for sub in cls.__subclasses__()))

    assert {type(refusal) for refusal in REFUSALS} | {WakeClaimed, SubscriptionRefused} == leaves(SubscriptionRefused)


@pytest.mark.parametrize("refusal", REFUSALS, ids=lambda refusal: type(refusal).__name__)
def test_a_refusal_is_the_tables_status_with_the_protocols_code_and_its_message(refusal: SubscriptionRefused) -> None:
    response = refused(refusal, {"X-Content-Type-Options": "nosniff"})
    assert response.status_code == ERRORS[type(refusal)].status
    assert response.headers["content-type"] == "application/json"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert msgspec.json.decode(response.body) == {"error": {"code": type(refusal).code, "message": str(refusal)}}


def test_a_claim_of_a_held_wake_names_its_holder_and_generation() -> None:
    response = refused(WakeClaimed("the wake is held", holder="w1", generation=3), {})
    assert response.status_code == 409
    assert msgspec.json.decode(response.body) == {
        "error": {"code": "ALREADY_CLAIMED", "message": "the wake is held", "current_holder": "w1", "generation": 3}
    }
