"""GET /usage: calls, errors, latency and tokens over time, aggregated from run records."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from pydantic import BaseModel, Field

UsageBy = Literal["tool", "model"]
BucketSize = Literal["1m", "5m", "15m", "1h", "6h", "1d"]
BUCKET_SECONDS: dict[str, int] = {
    "1m": 60,
    "5m": 300,
    "15m": 900,
    "1h": 3600,
    "6h": 21_600,
    "1d": 86_400,
}
MAX_RANGE = timedelta(days=31)  # the records a request may aggregate: a month at most
MAX_BUCKETS = 1000
DEFAULT_KEYS = 10
MAX_KEYS = 50
TOP = 10  # the slowest and the most failing tools


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageWindow:
    """Which records a usage aggregation reads (`since` <= started_at < `until`) and how it
    buckets them: bucket `i` starts at `origin + i * bucket_s` (`origin`: `since` rounded down
    to a whole bucket, counted from the Unix epoch in UTC)."""

    since: datetime
    until: datetime
    origin: datetime
    bucket_s: int

    @property
    def bucket_ms(self) -> int:
        return self.bucket_s * 1000


class UsageKey(BaseModel):
    """One tool's (or one provider and model's) totals over the whole window."""

    key: str = Field(
        description="The tool id; for `by=model`, `provider / model` (`model` alone for the "
        "operator's endpoint); `(other)` for the keys past `limit`, summed."
    )
    provider: str | None = Field(default=None, description="`by=model`: the tenant's provider.")
    model: str | None = Field(default=None, description="`by=model`: the model.")
    calls: int = Field(
        description="Tool calls; for `by=model`, model calls (a failed one too; records written "
        "before model calls were recorded count the chat's turns)."
    )
    errors: int = Field(description="Failed tool calls; for `by=model`, chats ended `error`.")
    error_rate: float = Field(description="errors / calls (by=model: errors / runs).")
    p50_ms: float | None = Field(
        default=None, description="`by=tool`: the median call duration (nearest rank)."
    )
    p95_ms: float | None = Field(
        default=None, description="`by=tool`: the 95th percentile call duration (nearest rank)."
    )
    runs: int | None = Field(default=None, description="`by=model`: chats.")
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None


class UsageSeries(BaseModel):
    """One key's numbers per bucket (the same order as `buckets`)."""

    key: str
    provider: str | None = None
    model: str | None = None
    calls: list[int]
    errors: list[int]
    runs: list[int] | None = None
    prompt_tokens: list[int] | None = None
    completion_tokens: list[int] | None = None
    total_tokens: list[int] | None = None


class UsageTotals(BaseModel):
    calls: int
    errors: int
    error_rate: float
    keys: int = Field(description="How many tools (or provider and model pairs) had any use.")
    runs: int | None = None
    total_tokens: int | None = None


class UsageReport(BaseModel):
    """Usage of the calling tenant in a window, per tool or per model, computed by the
    database from run records (chats, invokes and `/mcp` calls)."""

    by: UsageBy
    since: datetime
    until: datetime
    bucket: BucketSize
    bucket_s: int
    buckets: list[datetime] = Field(description="The start of each bucket (UTC).")
    totals: UsageTotals
    keys: list[UsageKey] = Field(
        description="The `limit` keys with the most calls, then `(other)` for the rest."
    )
    series: list[UsageSeries] = Field(description="Per bucket, in the order of `keys`.")
    slowest: list[UsageKey] = Field(
        description="`by=tool`: the ten tools with the highest p95 duration."
    )
    failing: list[UsageKey] = Field(
        description="`by=tool`: the ten tools with the most failed calls (then the highest "
        "error rate); only tools that failed."
    )
