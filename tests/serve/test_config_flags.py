"""The engine's and the server's settings are defined once (batching/config.py, serve/config.py):
the command line's options, Ray's app builder and the library read the same fields, names,
ranges and units."""
import click
import pytest
from click.testing import CliRunner

from localinfer.batching.config import MIB, EngineConfig, flag_fields, flag_keys, flags
from localinfer.serve.config import ServerConfig

from cli.config_options import config_options


def _command():
    got = {}

    @click.command()
    @config_options(EngineConfig, "engine")
    @config_options(ServerConfig, "config")
    def cmd(engine, config):
        got.update(engine=engine, config=config)
    return cmd, got


def test_no_flags_give_the_dataclass_defaults():
    cmd, got = _command()
    result = CliRunner().invoke(cmd, [], env={"LOCALINFER_API_KEY": None, "LOCALINFER_ORIGINS": None,
                                             "LOCALINFER_ALLOWED_HOSTS": None})
    assert result.exit_code == 0, result.output
    assert got["engine"] == EngineConfig()
    config = got["config"]
    assert (config.api_key, config.max_body, config.io_timeout, config.verbose, config.pooling) == \
        (None, ServerConfig().max_body, ServerConfig().io_timeout, False, None)
    assert config.cors_origins == config.allowed_hosts == ()


def test_flags_are_converted_once_and_agree_with_the_app_builder(tmp_path):
    argv = ["-np", "3", "-c", "512", "--queue", "0", "--prefix-cache", "16", "--prefix-cache-dir", str(tmp_path),
            "--prefix-cache-dir-size", "100", "--timeout", "2.5", "--cors-origins", "https://a.example/, b",
            "--api-key", "k", "-v"]
    cmd, got = _command()
    result = CliRunner().invoke(cmd, argv)
    assert result.exit_code == 0, result.output
    engine = got["engine"]
    assert (engine.n_slots, engine.n_ctx, engine.max_queue) == (3, 512, 0)
    assert (engine.prefix_cache_bytes, engine.prefix_cache_dir_bytes) == (16 * MIB, 100 * MIB)  # MiB on the flags
    assert got["config"].cors_origins == ("https://a.example", "b") and got["config"].verbose
    # the same settings as text, by the flags' long names (Ray's app builder, KubeRay's YAML)
    text = {"parallel": "3", "ctx_size": "512", "queue": "0", "prefix_cache": "16", "prefix_cache_dir": str(tmp_path),
            "prefix_cache_dir_size": "100"}
    assert EngineConfig(**flag_fields(EngineConfig, text)) == engine
    server = ServerConfig(**flag_fields(ServerConfig, {"timeout": "2.5", "cors_origins": "https://a.example/, b",
                                                       "api_key": "k", "verbose": "true"}))
    assert (server.io_timeout, server.cors_origins, server.api_key, server.verbose) == (2.5, ("https://a.example", "b"),
                                                                                       "k", True)


@pytest.mark.parametrize("argv, message", [
    (["-np", "0"], "-np"),
    (["--prefix-cache", "0", "--prefix-cache-dir", "x"], "needs the prefix cache"),
])
def test_bad_flags_are_usage_errors(argv, message, tmp_path):
    if "x" in argv:
        argv = [str(tmp_path) if a == "x" else a for a in argv]
    cmd, _ = _command()
    result = CliRunner().invoke(cmd, argv)
    assert result.exit_code == 2 and message in result.output, result.output


@pytest.mark.parametrize("text, message", [({"parallel": "0"}, "parallel must be between 1 and 256"),
                                           ({"ctx_size": "many"}, "ctx_size must be an int"),
                                           ({"prefix_cache": "1.5"}, "prefix_cache must be an int")])
def test_the_app_builders_text_is_checked_as_the_flags_are(text, message):
    with pytest.raises(ValueError, match=message):
        flag_fields(EngineConfig, text)


def test_every_flag_has_one_key_and_help():
    for cls in (EngineConfig, ServerConfig):
        specs = [spec for _, spec in flags(cls)]
        assert len(flag_keys(cls)) == len(specs)
        assert all(spec.help for spec in specs)
    assert not flag_keys(EngineConfig) & flag_keys(ServerConfig)
