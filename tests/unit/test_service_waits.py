"""The one wait loop every local service uses (process.wait_until_ready), and
the services' waits through it: no service process is started."""

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from local_services import llm_server, redis_server
from local_services.process import LocalServiceError, run_launcher, wait_until_ready


def answers(*replies):
    """A probe giving ``replies`` in turn; an exception instance is raised."""
    queue = list(replies)

    def probe():
        reply = queue.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply

    return probe


def never(*_):
    raise AssertionError("not called")


def test_ready_after_problems_returns_what_the_probe_found():
    probe = answers(ConnectionRefusedError("refused"), (False, "cluster status red"), (True, "green"))
    assert wait_until_ready(probe, timeout=60, pid=None, interval=0, exited=never, timed_out=never) == "green"


@pytest.mark.parametrize(
    "reply, problem", [((False, "cluster status red"), "cluster status red"), (OSError("no route"), "no route")]
)
def test_timeout_names_the_last_problem(reply, problem):
    with pytest.raises(LocalServiceError, match=rf"^gave up \(last: {problem}\)$"):
        wait_until_ready(
            answers(reply),
            timeout=0,
            pid=None,
            interval=0,
            exited=never,
            timed_out=lambda last: f"gave up (last: {last})",
        )


def test_a_started_process_that_died_is_reported_at_once():
    dead = 2**22 + 12345  # above the default pid_max: no such process
    with pytest.raises(LocalServiceError, match="^it exited$"):
        wait_until_ready(
            answers((False, "starting")), timeout=60, pid=dead, interval=0, exited=lambda: "it exited", timed_out=never
        )


def test_redis_wait_times_out_naming_the_server_and_the_problem(tmp_path: Path):
    settings = redis_server.RedisSettings(home=tmp_path, port=1)  # nothing listens on port 1
    with pytest.raises(
        LocalServiceError, match=r"redis at redis://127.0.0.1:1/0 did not answer PING within 0 s \(last: .*refused"
    ):
        redis_server.process(settings).wait(timeout=0, log=lambda _: None)


class _Models(BaseHTTPRequestHandler):
    served = [llm_server.MODEL_ALIAS]

    def do_GET(self):
        body = json.dumps({"data": [{"id": name} for name in self.served]}).encode()
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_llm_wait_until_our_model_is_listed(tmp_path: Path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Models)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = {"CHUNKRAG_HOME": str(tmp_path), "CHUNKRAG_LLM_PORT": str(server.server_address[1])}
    try:
        settings = llm_server.LlmSettings.from_environ({**os.environ, **env})
        llm_server.process(settings).wait(timeout=5, log=lambda _: None)
        _Models.served = ["another-model"]
        with pytest.raises(
            LocalServiceError, match=r"did not list .* within 0 s \(last: serving \['another-model'\] instead of"
        ):
            llm_server.process(settings).wait(timeout=0, log=lambda _: None)
    finally:
        _Models.served = [llm_server.MODEL_ALIAS]
        server.shutdown()
        server.server_close()


def test_the_launcher_runs_detached_and_captures_or_writes_its_output(tmp_path: Path):
    captured = run_launcher(["/bin/sh", "-c", "echo 4242; echo oops >&2"], cwd=tmp_path, timeout=30, timed_out=never)
    assert (captured.returncode, captured.stdout, captured.stderr) == (0, "4242\n", "oops\n")
    with (tmp_path / "launcher.log").open("wb") as output:
        run_launcher(
            ["/bin/sh", "-c", "echo started; echo warning >&2"],
            cwd=tmp_path,
            timeout=30,
            timed_out=never,
            output=output,
        )
    assert (tmp_path / "launcher.log").read_text() == "started\nwarning\n"
    with pytest.raises(LocalServiceError, match="^did not return$"):
        run_launcher(["sleep", "5"], cwd=tmp_path, timeout=0.2, timed_out=lambda: "did not return")
