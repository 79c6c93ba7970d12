"""URL safety: private-address refusal (SSRF), --allow-host, and the contamination blocklist."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Sequence
from pathlib import Path

import pytest

from medmis.tools import AllowedHost, Blocklist, SearchResult, ToolError, UrlPolicy, address_problem

PUBLIC = "93.184.216.34"


class FakeResolver:
    """A DNS table; records every lookup so tests can assert none happened."""

    def __init__(self, table: dict[str, Sequence[str]] | None = None) -> None:
        self.table = dict(table or {})
        self.calls: list[tuple[str, int]] = []

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        self.calls.append((host, port))
        if host not in self.table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return self.table[host]


# -- address classification ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "problem"),
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.5", "private"),
        ("192.168.1.1", "private"),
        ("fc00::1", "private"),
        ("169.254.169.254", "link-local/cloud metadata"),
        ("fe80::1", "link-local/cloud metadata"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("240.0.0.1", "reserved"),
        ("100.64.0.1", "not publicly routable"),
        ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped IPv6
        ("::ffff:169.254.169.254", "link-local/cloud metadata"),
        ("::ffff:10.0.0.1", "private"),
        ("2002:7f00:1::", "loopback"),  # 6to4 wrapping 127.0.0.1
        ("64:ff9b::a00:1", "private"),  # NAT64 wrapping 10.0.0.1
        ("fe80::1%eth0", "link-local/cloud metadata"),
    ],
)
def test_address_problem_refuses_non_public(address: str, problem: str) -> None:
    assert address_problem(address) == problem


@pytest.mark.parametrize(
    "address", [PUBLIC, "8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"]
)
def test_address_problem_accepts_public(address: str) -> None:
    assert address_problem(address) is None


# -- the policy ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/",
        "http://127.0.0.1:8000/admin",
        "http://[::1]/",
        "http://10.0.0.7/internal",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::ffff:127.0.0.1]/",
        "http://[::ffff:a9fe:a9fe]/",  # 169.254.169.254, hex-written
        "http://0.0.0.0:9000/",
    ],
)
async def test_literal_private_addresses_are_refused_without_dns(url: str) -> None:
    resolver = FakeResolver()
    policy = UrlPolicy(resolve=resolver)
    with pytest.raises(ToolError) as err:
        await policy.check(url)
    assert err.value.kind == "refused"
    assert "only public web pages" in err.value.message
    assert resolver.calls == []


async def test_hostname_resolving_to_loopback_is_refused() -> None:
    resolver = FakeResolver({"sneaky.example": ["127.0.0.1"]})
    with pytest.raises(ToolError) as err:
        await UrlPolicy(resolve=resolver).check("https://sneaky.example/page")
    assert err.value.kind == "refused"
    assert "loopback" in err.value.message and "sneaky.example" in err.value.message
    assert resolver.calls == [("sneaky.example", 443)]


async def test_any_private_address_among_several_refuses() -> None:
    resolver = FakeResolver({"mixed.example": [PUBLIC, "10.0.0.1"]})
    with pytest.raises(ToolError, match="private"):
        await UrlPolicy(resolve=resolver).check("http://mixed.example/")


async def test_public_host_passes_and_idna_is_resolved_encoded() -> None:
    resolver = FakeResolver({"news.example": [PUBLIC], "xn--bcher-kva.example": [PUBLIC]})
    policy = UrlPolicy(resolve=resolver)
    assert (await policy.check("https://news.example/a?b=1")).host == "news.example"
    await policy.check("http://bücher.example/")
    assert resolver.calls[-1] == ("xn--bcher-kva.example", 80)


@pytest.mark.parametrize(
    "url", ["ftp://example.org/file", "file:///etc/passwd", "gopher://x/", "javascript:alert(1)"]
)
async def test_only_http_and_https(url: str) -> None:
    with pytest.raises(ToolError) as err:
        await UrlPolicy(resolve=FakeResolver()).check(url)
    assert err.value.kind == "refused"
    assert "http" in err.value.message


async def test_unresolvable_host_is_not_found() -> None:
    with pytest.raises(ToolError) as err:
        await UrlPolicy(resolve=FakeResolver()).check("http://nowhere.example/")
    assert err.value.kind == "not_found"


async def test_dns_timeout() -> None:
    async def slow(host: str, port: int) -> list[str]:
        await asyncio.sleep(5)
        return [PUBLIC]

    with pytest.raises(ToolError) as err:
        await UrlPolicy(resolve=slow, resolve_timeout=0.01).check("http://slow.example/")
    assert err.value.kind == "timeout"


async def test_allow_host_opens_that_host_and_port_only() -> None:
    resolver = FakeResolver({"localhost": ["127.0.0.1"]})
    policy = UrlPolicy(["localhost:8000", "127.0.0.1"], resolve=resolver)
    await policy.check("http://localhost:8000/page")
    await policy.check("http://LOCALHOST.:8000/page")
    await policy.check("http://127.0.0.1/")
    await policy.check("http://127.0.0.1:5555/")
    assert resolver.calls == []  # an opened host is not looked up at all
    with pytest.raises(ToolError, match="loopback"):
        await policy.check("http://localhost:8001/page")
    with pytest.raises(ToolError, match="loopback"):
        await policy.check("http://[::1]/")


async def test_allow_host_ipv6_and_default_ports() -> None:
    policy = UrlPolicy(["[::1]:8080", "internal.lab:443"], resolve=FakeResolver())
    await policy.check("http://[::1]:8080/")
    await policy.check("https://internal.lab/")  # 443 is https's default port
    with pytest.raises(ToolError):
        await policy.check("http://[::1]/")


async def test_allow_host_does_not_lift_the_blocklist() -> None:
    policy = UrlPolicy(["huggingface.co"], resolve=FakeResolver())
    with pytest.raises(ToolError) as err:
        await policy.check("https://huggingface.co/datasets/cais/hle")
    assert err.value.kind == "refused"


@pytest.mark.parametrize(
    ("spec", "host", "port"),
    [
        ("localhost", "localhost", None),
        ("localhost:8000", "localhost", 8000),
        ("Example.ORG.", "example.org", None),
        ("http://127.0.0.1:9000/", "127.0.0.1", 9000),
        ("[::1]", "::1", None),
        ("[0:0::1]:8080", "::1", 8080),
        ("::1", "::1", None),
    ],
)
def test_allowed_host_parse(spec: str, host: str, port: int | None) -> None:
    assert AllowedHost.parse(spec) == AllowedHost(host, port)


@pytest.mark.parametrize("spec", ["", "host:abc", "host:70000", "[::1]x"])
def test_allowed_host_parse_rejects(spec: str) -> None:
    with pytest.raises(ValueError):
        AllowedHost.parse(spec)


# -- the contamination blocklist ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "https://huggingface.co/datasets/AI4HealthResearch/MedMisBench",
        "https://huggingface.co/datasets/AI4HealthResearch/MedMisBench/viewer/default/train",
        "https://www.huggingface.co/datasets/ai4healthresearch/medmisbench/resolve/main/x.parquet",
        "https://hf.co/datasets/AI4HealthResearch/MedMisBench",
        "https://arxiv.org/abs/2606.12291",
        "https://arxiv.org/abs/2606.12291v2",
        "http://export.arxiv.org/abs/2606.12291",
        "https://arxiv.org/pdf/2606.12291v1",
        "https://arxiv.org/html/2606.12291v1#S3",
        "https://github.com/someone/MedMisBench",
        "https://github.com/someone/medmisbench/blob/main/data/test.jsonl",
        "https://example.org/blog/medmis-bench-released",
        "https://huggingface.co/datasets/cais/hle",
        "https://huggingface.co/datasets/cais/hle/viewer",
        "https://lastexam.ai/",
        "https://agi.lastexam.ai/questions",
        "https://github.com/centerforaisafety/hle",
        "https://arxiv.org/abs/2501.14249",
    ],
)
def test_default_blocklist_blocks(url: str) -> None:
    assert Blocklist.default().match(url) is not None


@pytest.mark.parametrize(
    "url",
    [
        "https://arxiv.org/abs/2606.12290",
        "https://huggingface.co/datasets/cais/mmlu",
        "https://github.com/someone/other-bench",
        "https://lastexam.ai.evil.example/",
        "https://notlastexam.ai/",
        "https://pubmed.ncbi.nlm.nih.gov/12345678/",
        "https://medref.example/articles/scurvy",
    ],
)
def test_default_blocklist_allows(url: str) -> None:
    assert Blocklist.default().match(url) is None


def test_blocklist_is_user_extendable(tmp_path: Path) -> None:
    path = tmp_path / "block.txt"
    path.write_text("# leaked answer keys\n\nanswers.example/keys\nre:board-?exam-answers\n", "utf-8")
    from_file = Blocklist.from_file(path)
    assert from_file.match("https://answers.example/keys/2024") == "answers.example/keys"
    assert from_file.match("https://answers.example/other") is None
    assert from_file.match("https://x.example/board-exam-answers.html") is not None
    assert from_file.match("https://lastexam.ai/") is not None  # defaults kept
    only_file = Blocklist.from_file(path, include_defaults=False)
    assert len(only_file) == 2 and only_file.match("https://lastexam.ai/") is None
    extended = Blocklist.default().extend(["https://wiki.example/Scurvy_answers"])
    assert extended.match("http://www.wiki.example/scurvy_answers?x=1") is not None


def test_blocklist_filters_results_in_order_and_refuses() -> None:
    results = [
        SearchResult(title="a", url="https://medref.example/a"),
        SearchResult(title="leak", url="https://huggingface.co/datasets/AI4HealthResearch/MedMisBench"),
        SearchResult(title="b", url="https://medref.example/b"),
        SearchResult(title="paper", url="https://arxiv.org/pdf/2606.12291"),
    ]
    assert [r.title for r in Blocklist.default().filter(results)] == ["a", "b"]
    with pytest.raises(ToolError) as err:
        Blocklist.default().check("https://lastexam.ai/")
    assert err.value.kind == "refused"
    assert "blocklist" in err.value.message and "other sources" in err.value.message
    assert Blocklist(()).match("https://lastexam.ai/") is None


async def test_policy_applies_blocklist_before_dns() -> None:
    resolver = FakeResolver({"arxiv.org": [PUBLIC]})
    with pytest.raises(ToolError) as err:
        await UrlPolicy(resolve=resolver).check("https://arxiv.org/abs/2606.12291")
    assert err.value.kind == "refused"
    assert resolver.calls == []
