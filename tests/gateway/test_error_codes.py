"""The error-code table of docs/observability.md: complete, and right about what it says."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import anthropic
import pytest

from tests.fake_upstream import FakeUpstream

ROOT = Path(__file__).parents[2]
#: How gateway/ spells an error's code: ``code="..."`` (or ``code = "..."``), the second
#: argument of upstream.py's ``_failure(status, "...", message)``, and a ``*_CODE`` constant.
_SPELLINGS = (
    r'\bcode\s*=\s*"([a-z_]+)"',
    r'_failure\(\s*\d+,\s*"([a-z_]+)"',
    r'_CODE\s*=\s*"([a-z_]+)"',
)
KEYS = "auth:\n  keys:\n    - {key: key-a, tenant: a}\n"


def _codes_in_source() -> set[str]:
    codes: set[str] = set()
    for path in (ROOT / "gateway").glob("*.py"):
        text = path.read_text()
        for spelling in _SPELLINGS:
            codes.update(re.findall(spelling, text))
    return codes


def _table() -> dict[str, list[str]]:
    """The table's rows by code: its cells (status, routes, when, retried, messages type)."""
    section = (ROOT / "docs" / "observability.md").read_text().split("## Error codes", 1)[1]
    rows = {}
    for line in section.split("\n## ", 1)[0].splitlines():
        cells = [cell.strip() for cell in line.strip("|").split(" | ")]
        if line.startswith("| `") and len(cells) == 6 and cells[1].isdigit():  # (not the header)
            rows[cells[0].strip("`")] = cells[1:]
    return rows


def test_every_error_code_in_the_source_is_in_the_table() -> None:
    source, table = _codes_in_source(), _table()
    assert len(source) > 30  # the greps still find the codes
    assert sorted(source - table.keys()) == []
    assert sorted(table.keys() - source) == []  # no row for a code the gateway no longer sends


def test_readme_points_to_the_table() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "docs/observability.md#error-codes" in readme


@pytest.mark.parametrize(
    ("code", "send"),
    [
        ("invalid_api_key", {"headers": {"authorization": "Bearer wrong"}, "json": {}}),
        ("invalid_json", {"content": b"{not json", "headers": {"content-type": "application/json"}}),
        ("invalid_type", {"json": [1, 2]}),
        ("missing", {"json": {"messages": [{"role": "user", "content": "hi"}]}}),
        ("model_not_found", {"json": {"model": "nope", "messages": [{"role": "user", "content": "hi"}]}}),
        ("request_too_large", {"json": {"model": "fake-model", "pad": "x" * 4096}}),
        ("unsupported_content_encoding", {"content": b"\x1f\x8b", "headers": {"content-encoding": "gzip"}}),
    ],
)  # fmt: skip
def test_the_table_gives_the_status_the_gateway_answers(
    make_gateway: Any, upstream: FakeUpstream, code: str, send: dict[str, Any]
) -> None:
    gw = make_gateway(KEYS + "server: {max_body_bytes: 2048}")
    headers = {"authorization": "Bearer key-a", **send.get("headers", {})}
    body = {key: value for key, value in send.items() if key != "headers"}
    response = gw.http.post("/v1/chat/completions", headers=headers, **body)
    assert response.json()["error"]["code"] == code
    assert str(response.status_code) == _table()[code][0]
    assert upstream.stats["chat"] == 0


@pytest.mark.parametrize(
    ("code", "error"),
    [
        ("invalid_api_key", anthropic.AuthenticationError),
        ("model_not_found", anthropic.NotFoundError),
    ],
)
def test_the_table_gives_the_messages_type_the_sdk_sees(
    make_gateway: Any, upstream: FakeUpstream, code: str, error: type[anthropic.APIStatusError]
) -> None:
    gw = make_gateway(KEYS)
    key = "wrong" if code == "invalid_api_key" else "key-a"
    client = anthropic.Anthropic(base_url=gw.url, api_key=key, max_retries=0)
    with pytest.raises(error) as raised:
        client.messages.create(
            model="nope", max_tokens=5, messages=[{"role": "user", "content": "hi"}]
        )
    assert raised.value.body["error"]["type"] == _table()[code][4].strip("`")  # type: ignore[index]
    assert str(raised.value.status_code) == _table()[code][0]
