"""Chat fixtures (tests/support/fixtures/chat.py)."""

from tests.support.fixtures.chat import chat, model_client

__all__ = ["chat", "model_client"]
