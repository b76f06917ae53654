"""``check-config --connect``: a PING to Redis and one request to the sink, ok or failed."""

from __future__ import annotations

import itertools
import textwrap
from pathlib import Path

import httpx
import pytest

from collector.config import build_config, raw_settings
from reporter._commands.cli import main
from reporter._commands.probe import probe_sink
from reporter._config import ReporterConfig
from reporter._demo.endpoint import LocalEndpoint
from tests.support.servers import Server, free_port

pytestmark = pytest.mark.usefixtures("restore_logging")

SECRET = "probe-secret-4242"


def config_file(tmp_path: Path, redis_url: str, sink_url: str) -> Path:
    path = tmp_path / "probe.toml"
    path.write_text(
        textwrap.dedent(f"""
        [redis]
        url = "{redis_url}"
        connect_timeout_seconds = 0.5
        socket_timeout_seconds = 0.5

        [sink]
        url = "{sink_url}"
        connect_timeout_seconds = 0.5

        [sink.headers]
        X-Api-Credential = "{SECRET}"
    """),
        encoding="utf-8",
    )
    return path


def test_both_answer(
    tmp_path: Path, own_server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    endpoint = LocalEndpoint().start()
    try:
        path = config_file(tmp_path, own_server.url, f"{endpoint.url}?api_key={SECRET}")
        assert main(["check-config", "--connect", str(path)]) == 0
    finally:
        endpoint.stop()
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert f"redis: ok: redis redis://127.0.0.1:{own_server.port}/0 answered PING in" in out
    # LocalEndpoint takes only POST: any answer shows the way there works
    [sink] = [line for line in lines if line.startswith("sink: ")]
    assert sink.startswith(f"sink: ok: HEAD {endpoint.url}?api_key=*** answered HTTP 501 in")
    assert endpoint.requests == 0  # no POST, no events
    assert SECRET not in out + err


def test_neither_answers_exit_3_with_a_line_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    closed = free_port()
    path = config_file(
        tmp_path,
        f"redis://:{SECRET}@127.0.0.1:{closed}/0",
        f"http://127.0.0.1:{closed}/ingest?token={SECRET}",
    )
    assert main(["check-config", "--connect", str(path)]) == 3
    out, err = capsys.readouterr()
    failed = [line for line in out.splitlines() if ": failed: " in line]
    assert [line.split(":")[0] for line in failed] == ["redis", "sink"]
    assert "ConnectError" in failed[1]
    assert "Traceback" not in out + err and SECRET not in out + err


def sink_config(url: str = "https://ingest.example/v1") -> ReporterConfig:
    raw = raw_settings(ReporterConfig())
    raw["sink"].update(url=url, headers={"Authorization": "Bearer x"})
    return build_config(raw, "test", env={}, interpolate=False, cls=ReporterConfig)


def test_refused_credentials_are_a_failure() -> None:
    probe = probe_sink(
        sink_config(), transport=httpx.MockTransport(lambda request: httpx.Response(401))
    )
    assert not probe.ok
    assert "HTTP 401" in probe.detail and "refused the credentials" in probe.detail


def test_the_probe_method_and_the_configured_headers_are_used() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(204)

    probe = probe_sink(sink_config(), "OPTIONS", httpx.MockTransport(answer))
    assert probe.ok and "answered HTTP 204" in probe.line()
    [request] = seen
    assert request.method == "OPTIONS" and request.headers["Authorization"] == "Bearer x"
    assert request.content == b""


# -- the anti-addiction interface: a report without items proves the key --------------------

NPPA_KEY = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"


def nppa_file(tmp_path: Path, redis_url: str, base_url: str, key: str, games: str = "") -> Path:
    (tmp_path / "nppa.key").write_text(key + "\n", encoding="utf-8")
    path = tmp_path / "nppa.toml"
    path.write_text(
        textwrap.dedent(f"""
        [redis]
        url = "{redis_url}"
        [sink]
        kind = "nppa"
        [nppa]
        base_url = "{base_url}"
        app_id = "probe-app"
        secret_key_file = "{tmp_path / "nppa.key"}"
        [games."farm"]
        biz_id = "1101999999"
    """)
        + games,
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize(
    ("accepted", "ok", "said"),
    [
        (NPPA_KEY, True, "answered 3002 empty collections: the key and identity passed"),
        (
            "ab" * 16,
            False,
            "answered nppa 1011 identity check failed; identity check failed: "
            "check [nppa] secret_key",
        ),
    ],
)
def test_the_nppa_key_is_proven_without_reporting_anything(
    tmp_path: Path,
    own_server: Server,
    capsys: pytest.CaptureFixture[str],
    accepted: str,
    ok: bool,
    said: str,
) -> None:
    from reporter._demo.nppa_mock import NppaEndpoint

    with NppaEndpoint(app_id="probe-app", secret_key=accepted, biz_ids=["1101999999"]) as endpoint:
        path = nppa_file(tmp_path, own_server.url, endpoint.url, NPPA_KEY)
        assert main(["check-config", "--connect", str(path)]) == (0 if ok else 3)
        with endpoint.lock:
            requests = list(endpoint.requests)
    out, err = capsys.readouterr()
    [sink] = [line for line in out.splitlines() if line.startswith("sink: ")]
    assert sink.startswith(
        f"sink: {'ok' if ok else 'failed'}: POST {endpoint.url}"
        "/behavior/collection/loginout (app probe-app, bizId 1101999999, "
        "no items)"
    )
    assert said in sink
    assert [(r.items, r.errcode) for r in requests] == [(0, 3002 if ok else 1011)]
    assert endpoint.accepted == [] and NPPA_KEY not in out + err


MORE_GAMES = textwrap.dedent("""
    [games."kart"]
    biz_id = "1101999999"
    [games."moon"]
    biz_id = "1101999998"
    [games."star"]
    biz_id = "1101999997"
""")


def test_every_biz_id_is_proven_each_on_a_slot_of_the_shared_rate(
    tmp_path: Path, own_server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    """One probe per bizId (a game the app may not report for answers 1010), each on a
    slot of the rate the reporters share in Redis: never faster than the interface's."""
    from reporter._demo.nppa_mock import NppaEndpoint

    with NppaEndpoint(
        app_id="probe-app", secret_key=NPPA_KEY, biz_ids=["1101999999", "1101999997"]
    ) as endpoint:
        path = nppa_file(tmp_path, own_server.url, endpoint.url, NPPA_KEY, MORE_GAMES)
        assert main(["check-config", "--connect", str(path)]) == 3
        with endpoint.lock:
            requests = list(endpoint.requests)
    out, _ = capsys.readouterr()
    sink = out[out.index("sink: ") :].splitlines()
    assert sink[0] == (
        f"sink: failed: POST {endpoint.url}/behavior/collection/loginout (app probe-app, "
        "no items): 2 of 3 bizIds passed"
    )
    assert sink[1].startswith("  bizId 1101999999 (games farm, kart) answered 3002 ")
    assert sink[2].startswith("  bizId 1101999998 (game moon) answered nppa 1010 ")
    assert "check [nppa] app_id and the game's biz_id" in sink[2]
    assert sink[3].startswith("  bizId 1101999997 (game star) answered 3002 ")
    assert [(r.biz_id, r.items, r.errcode) for r in requests] == [
        ("1101999999", 0, 3002),
        ("1101999998", 0, 1010),
        ("1101999997", 0, 3002),
    ]
    gaps = [b.at - a.at for a, b in itertools.pairwise(requests)]
    # slots 1 / 9.6 s apart, each request within 20 ms of its own (unpaced: a few ms apart)
    assert min(gaps) >= 0.07, gaps


def test_after_a_1006_the_other_biz_ids_are_not_probed(
    tmp_path: Path, own_server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    from reporter._demo.nppa_mock import NppaEndpoint

    with NppaEndpoint(
        app_id="probe-app",
        secret_key=NPPA_KEY,
        biz_ids=["1101999999", "1101999998", "1101999997"],
        force=lambda n: 1006 if n == 1 else None,
    ) as endpoint:
        path = nppa_file(tmp_path, own_server.url, endpoint.url, NPPA_KEY, MORE_GAMES)
        assert main(["check-config", "--connect", str(path)]) == 3
        with endpoint.lock:
            requests = list(endpoint.requests)
    out, _ = capsys.readouterr()
    sink = out[out.index("sink: ") :].splitlines()
    assert "0 of 3 bizIds passed" in sink[0] and "1006" in sink[1]
    assert all("not sent: the interface throttles the app id" in line for line in sink[2:4])
    assert len(requests) == 1
