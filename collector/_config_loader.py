"""Turn a TOML file plus environment overrides into a validated config.

All validation happens here, once, for the SDK's ``TelemetryConfig`` and for any subclass
that adds sections (the reporter's).  A config class's sections are its dataclass-typed
fields, and the sections it plugs in (``PLUGGED_SECTIONS``: name -> section class, kept in
its ``plugged`` field; a dotted name such as ``sink.ndjson`` is a table inside a section);
the sections it names in ``OTHER_SECTIONS`` belong to another reader of the same file and
are skipped.  The loader knows config classes by their shape only (``ConfigClass``), so
it imports no config module: ``collector._config`` builds on it.  Every error names where
the value came from (file or environment variable), the key, what was expected and what was
found.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import stat
import tomllib
import typing
from collections.abc import Mapping
from importlib.resources import files
from types import MappingProxyType
from typing import Any, ClassVar, Protocol, TypeVar
from urllib.parse import parse_qsl, urlsplit

from collector._exceptions import ConfigError
from collector._sections import Where
from collector.logs import is_credential_name, mask
from collector.store import validate_game

CONFIG_ENV = "TELEMETRY_CONFIG"
ENV_PREFIX = "TELEMETRY_"
DEFAULT_CONFIG_NAME = "telemetry.toml"
GAMES = "games"
# The source of a config read from the packaged default (no path, no $TELEMETRY_CONFIG).
PACKAGED_SOURCE = f"<packaged {DEFAULT_CONFIG_NAME}>"
# A config class's plugged sections: the class attribute naming them, the field holding them.
PLUGGED_SECTIONS, PLUGGED = "PLUGGED_SECTIONS", "plugged"


class ConfigClass(Protocol):
    """What the loader needs of a config class: dataclass fields, each section a dataclass,
    ``games`` a mapping of game name to a dataclass of per-game keys, plus ``source`` and
    ``notices``; the rules that tie keys together in ``check`` and ``advise``."""

    OTHER_SECTIONS: ClassVar[tuple[str, ...]]
    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]

    @property
    def games(self) -> Mapping[str, Any]: ...

    @property
    def notices(self) -> tuple[str, ...]: ...

    def __init__(self, *, source: str, notices: tuple[str, ...], **sections: Any) -> None: ...

    def check(self, where: Where) -> None: ...

    def advise(self, where: Where) -> list[str]: ...


C = TypeVar("C", bound=ConfigClass)
_INTERPOLATION = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def default_config_text() -> str:
    """The documented default file, read from the installed package."""
    return (files("collector._defaults") / DEFAULT_CONFIG_NAME).read_text(encoding="utf-8")


def sections_of(cls: type[ConfigClass]) -> dict[str, type]:
    """A config class's sections: its dataclass-typed fields, then those it plugs in, by
    name."""
    hints = typing.get_type_hints(cls)
    fields = {
        f.name: hints[f.name]
        for f in dataclasses.fields(cls)
        if dataclasses.is_dataclass(hints[f.name])
    }
    return {**fields, **plugged_sections_of(cls)}


def plugged_sections_of(cls: type[ConfigClass]) -> dict[str, type]:
    """The sections ``cls`` plugs in (``PLUGGED_SECTIONS``), by name."""
    return dict(getattr(cls, PLUGGED_SECTIONS, {}))


def section_value(config: ConfigClass, name: str) -> Any:
    """A section of ``config`` by name, plugged in or not."""
    if name in plugged_sections_of(type(config)):
        return getattr(config, PLUGGED)[name]
    return getattr(config, name)


def games_settings_of(cls: type[ConfigClass]) -> type:
    """The class of one ``[games."<name>"]`` table in a config class."""
    game_cls: type = typing.get_args(typing.get_type_hints(cls)[GAMES])[1]
    return game_cls


def load_config(
    path: str | os.PathLike[str] | None, env: Mapping[str, str] | None, cls: type[C]
) -> C:
    env = os.environ if env is None else env
    path = path or env.get(CONFIG_ENV) or None
    if path is None:
        source, text = PACKAGED_SOURCE, default_config_text()
    else:
        source = os.fspath(path)
        text = _read_text(source)
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from exc
    config = build_config(raw, source, env, cls=cls)
    if path is not None and (exposed := _exposed_secrets(source, raw, cls)):
        config = dataclasses.replace(config, notices=(*config.notices, exposed))
    return config


def _read_text(source: str) -> str:
    try:
        with open(source, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read config file: {exc.strerror}") from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(
            f"{source}: not UTF-8 text: byte 0x{data[exc.start]:02x} at line {line} "
            f"(offset {exc.start}); a TOML file is UTF-8"
        ) from None


def build_config(
    raw: Mapping[str, Any],
    source: str,
    env: Mapping[str, str] | None = None,
    *,
    interpolate: bool = True,
    cls: type[C],
) -> C:
    """Validate already-parsed data (from TOML or keyword arguments) into a ``cls``."""
    env = os.environ if env is None else env
    if interpolate:
        _refuse_unset_variables(raw, source, env)
        raw = _interpolate(raw, env)
    sections = sections_of(cls)
    plugged = plugged_sections_of(cls)
    raw = _lift_inner_tables(raw, [name for name in plugged if "." in name])
    overrides = _env_overrides(env, sections)
    known = sorted([*sections, GAMES, *cls.OTHER_SECTIONS])
    for name in raw:
        if name not in known:
            raise ConfigError(
                f"{source}: unknown section [{name}]; expected one of {', '.join(known)}"
            )
    values: dict[str, Any] = {}
    notices: list[str] = []
    for name, section in sections.items():
        table = raw.get(name, {})
        if not isinstance(table, Mapping):
            raise ConfigError(f"{source}: [{name}] must be a table, found {_echo(table)}")
        values[name] = _build_section(
            section, name, table, source, overrides.get(name, {}), notices
        )
    values[GAMES] = _build_games(raw.get(GAMES, {}), source, games_settings_of(cls))
    if plugged:
        values[PLUGGED] = MappingProxyType({name: values.pop(name) for name in plugged})
    config = cls(**values, source=source, notices=tuple(notices))

    def where(section: str, key: str) -> str:
        var = overrides.get(section, {}).get(key)
        return f"environment variable {var[0]}" if var else source

    config.check(where)
    advice = config.advise(where)
    return dataclasses.replace(config, notices=(*notices, *advice)) if advice else config


def raw_settings(config: ConfigClass) -> dict[str, dict[str, Any]]:
    """A config as plain nested dicts, secrets included, ready for ``build_config`` (a
    section plugged into another, ``sink.ndjson``, as a table inside it)."""
    raw: dict[str, dict[str, Any]] = {}
    for name in sections_of(type(config)):
        section = section_value(config, name)
        outer, _, inner = name.rpartition(".")
        table = raw.setdefault(outer, {}) if outer else raw
        table[inner] = {f.name: _raw(getattr(section, f.name)) for f in dataclasses.fields(section)}
    raw[GAMES] = {g: dataclasses.asdict(s) for g, s in config.games.items()}
    return raw


def _raw(value: Any) -> Any:
    """A setting's value as plain data (a table of sections as a table of tables)."""
    if isinstance(value, Mapping):
        return {k: _raw(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _raw(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return value


def _exposed_secrets(source: str, raw: Mapping[str, Any], cls: type[ConfigClass]) -> str:
    """A notice if the file at ``source`` may be read by others than its owner and holds a
    secret setting's value itself (not only ``${NAME}`` references to the environment)."""
    if os.name == "nt":  # modes do not say who may read a file
        return ""
    try:
        mode = os.stat(source).st_mode
    except OSError:
        return ""
    who = [n for bit, n in ((stat.S_IRGRP, "its group"), (stat.S_IROTH, "everyone")) if mode & bit]
    if not who:
        return ""
    sections = sections_of(cls)
    raw = _lift_inner_tables(raw, [name for name in plugged_sections_of(cls) if "." in name])
    held = [
        f"[{name}] {f.name}"
        for name, section in sections.items()
        if isinstance(table := raw.get(name), Mapping)
        for f in dataclasses.fields(section)
        if f.metadata.get("secret") and _holds_secret(table.get(f.name))
    ]
    if not held:
        return ""
    return (
        f"{source} may be read by {' and '.join(who)} (mode {stat.S_IMODE(mode):04o}) and "
        f"holds secrets ({', '.join(held)}): make it readable by its owner only (chmod 600), "
        "or put the secrets in environment variables and write ${NAME} in their place"
    )


def _holds_secret(value: Any) -> bool:
    """Whether a secret setting's value as written in the file holds a secret itself: a
    password or token in a URL, a credential header's value, any other non-empty text;
    ``${NAME}`` references do not count."""
    if isinstance(value, Mapping):  # headers: a credential's value, less its scheme
        return any(
            is_credential_name(str(k)) and _holds_secret(str(v).split(None, 1)[-1])
            for k, v in value.items()
        )
    if not isinstance(value, str):
        return False
    text = _INTERPOLATION.sub("", value).strip()
    if "://" not in text and "@" not in text:
        return bool(text)
    try:
        url = urlsplit(text if "//" in text else f"//{text}")
        user, password = url.username, url.password
    except ValueError:
        return True  # not a URL after all: take it as a secret
    return bool(password or (user and password is None)) or any(
        is_credential_name(k) and v for k, v in parse_qsl(url.query, keep_blank_values=True)
    )


def _lift_inner_tables(raw: Mapping[str, Any], names: list[str]) -> Mapping[str, Any]:
    """``raw`` with each table named ``outer.inner`` taken out of ``[outer]`` and set beside
    it under its dotted name, so it is built as a section of its own."""
    if not names:
        return raw
    lifted = dict(raw)
    for name in names:
        outer, _, inner = name.rpartition(".")
        table = lifted.get(outer)
        if isinstance(table, Mapping) and inner in table:
            lifted[outer] = {k: v for k, v in table.items() if k != inner}
            lifted[name] = table[inner]
    return lifted


def _unset_variables(
    value: Any, env: Mapping[str, str], path: tuple[str, ...]
) -> list[tuple[str, str]]:
    """Every ``${NAME}`` in ``value`` whose variable is not set: (name, key), in file order."""
    if isinstance(value, str):
        return [
            (name, _key_name(path))
            for match in _INTERPOLATION.finditer(value)
            if (name := match.group(1)) is not None and name not in env
        ]
    if isinstance(value, Mapping):
        return [m for k, v in value.items() for m in _unset_variables(v, env, (*path, k))]
    if isinstance(value, list):
        return [m for v in value for m in _unset_variables(v, env, path)]
    return []


def _key_name(path: tuple[str, ...]) -> str:
    """A key as the docs and the other errors spell it: ``[redis] url``,
    ``[sink.headers] Authorization``, ``[games."farm"] biz_id``."""

    def part(name: str) -> str:
        return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else f'"{name}"'

    *table, key = path or ("",)
    return f"[{'.'.join(part(t) for t in table)}] {part(key)}" if table else part(key)


def _refuse_unset_variables(raw: Mapping[str, Any], source: str, env: Mapping[str, str]) -> None:
    """One error naming every unset variable the file refers to, so one run shows them all."""
    missing = _unset_variables(raw, env, ())
    if not missing:
        return
    names = list(dict.fromkeys(name for name, _ in missing))
    uses = "; ".join(f"${{{name}}} at {key}" for name, key in missing)
    noun = "variable is" if len(names) == 1 else "variables are"
    raise ConfigError(f"{source}: {uses}: the environment {noun} not set: {', '.join(names)}")


def _interpolate(value: Any, env: Mapping[str, str]) -> Any:
    """``${NAME}`` replaced by the variable (every one is set: refused before), ``$$`` by
    ``$``."""
    if isinstance(value, str):
        return _INTERPOLATION.sub(lambda m: "$" if m.group(1) is None else env[m.group(1)], value)
    if isinstance(value, Mapping):
        return {k: _interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, env) for v in value]
    return value


def _env_overrides(
    env: Mapping[str, str], sections: Mapping[str, type]
) -> dict[str, dict[str, tuple[str, str]]]:
    """``TELEMETRY_REDIS_URL=...`` -> {"redis": {"url": ("TELEMETRY_REDIS_URL", "...")}}."""
    out: dict[str, dict[str, tuple[str, str]]] = {}
    for var, value in env.items():
        if not var.startswith(ENV_PREFIX) or var == CONFIG_ENV:
            continue
        rest = var[len(ENV_PREFIX) :].lower()
        # The longest section name that prefixes it: TELEMETRY_SINK_NDJSON_DIRECTORY is
        # [sink.ndjson] directory, not [sink] ndjson_directory.
        section, key = next(
            (
                (name, rest[len(name) + 1 :])
                for name in sorted(sections, key=len, reverse=True)
                if rest.startswith(name.replace(".", "_") + "_")
            ),
            ("", ""),
        )
        if not key:
            continue  # not ours: other readers and tools use TELEMETRY_* too
        cls = sections[section]
        if key not in {f.name for f in dataclasses.fields(cls)}:
            raise ConfigError(
                f"environment variable {var}: unknown key {key!r} in [{section}]; "
                f"expected one of {', '.join(f.name for f in dataclasses.fields(cls))}"
            )
        out.setdefault(section, {})[key] = (var, value)
    return out


def _build_section(
    cls: type,
    name: str,
    table: Mapping[str, Any],
    source: str,
    overrides: Mapping[str, tuple[str, str]],
    notices: list[str],
) -> Any:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    others = getattr(cls, "OTHER_KEYS", ())  # another reader's keys in the same table
    for key in table:
        if key not in fields and key not in others:
            raise ConfigError(
                f"{source}: [{name}] unknown key {key!r}; expected one of {', '.join(fields)}"
            )
    values: dict[str, Any] = {}
    for key, f in fields.items():
        if key in overrides:
            var, text = overrides[key]
            where = f"environment variable {var}"
            value = _from_env_text(text, hints[key], where, f"[{name}] {key}", f.metadata)
        elif key in table:
            where, value = source, table[key]
        else:
            continue
        renamed = (f.metadata.get("renamed") or {}).get(value) if isinstance(value, str) else None
        if renamed is not None:
            notices.append(
                f"{where}: [{name}] {key}: {value!r} is a deprecated name for "
                f"{renamed!r}; write {renamed!r}"
            )
            value = renamed
        values[key] = _check_value(value, hints[key], f.metadata, where, f"[{name}] {key}")
    return cls(**values)


def _build_games(table: Any, source: str, cls: type) -> Mapping[str, Any]:
    if not isinstance(table, Mapping):
        raise ConfigError(f"{source}: [games] must be a table of tables, found {_echo(table)}")
    games: dict[str, Any] = {}
    for game, section in table.items():
        try:
            validate_game(game)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{source}: [games.{game!r}]: {exc}") from None
        if not isinstance(section, Mapping):
            raise ConfigError(f'{source}: [games."{game}"] must be a table, found {_echo(section)}')
        games[game] = _build_section(cls, f'games."{game}"', section, source, {}, [])
    return MappingProxyType(games)


_PLAIN = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _describe(tp: Any) -> str:
    if tp in _PLAIN:
        return _PLAIN[tp]
    if typing.get_origin(tp) is tuple:
        return f"a list of {_describe(typing.get_args(tp)[0]).split(' ', 1)[-1]}s"
    if dataclasses.is_dataclass(typing.get_args(tp)[1]):
        return "a table of tables"
    return f"a table of {_describe(typing.get_args(tp)[1]).split(' ', 1)[-1]}s"


def _from_env_text(text: str, tp: Any, where: str, key: str, meta: Mapping[str, Any]) -> Any:
    if tp is str:
        return text
    try:
        parsed = tomllib.loads(f"v = {text}")
    except tomllib.TOMLDecodeError:
        parsed = {}
    if set(parsed) != {"v"}:  # not TOML, or more than one value ("4\nx = 5")
        raise _mismatch(text, f"{_describe(tp)} (TOML syntax)", where, key, meta)
    return parsed["v"]


def _check_value(value: Any, tp: Any, meta: Mapping[str, Any], where: str, key: str) -> Any:
    if typing.get_origin(tp) is tuple:  # tuple[X, ...]: a TOML array
        if not isinstance(value, list | tuple):
            raise _mismatch(value, _describe(tp), where, key, meta)
        item_type = typing.get_args(tp)[0]
        return tuple(
            _check_value(v, item_type, meta, where, f"{key}[{i}]") for i, v in enumerate(value)
        )
    if typing.get_origin(tp) is not None:  # Mapping[str, X]
        if not isinstance(value, Mapping):
            raise _mismatch(value, _describe(tp), where, key, meta)
        item_type = typing.get_args(tp)[1]
        if isinstance(item_type, type) and dataclasses.is_dataclass(item_type):  # [a.b."<k>"]
            return MappingProxyType(
                {str(k): _table_value(v, item_type, where, key, str(k)) for k, v in value.items()}
            )
        return MappingProxyType(
            {
                str(k): _check_value(v, item_type, meta, where, f"{key}.{k}")
                for k, v in value.items()
            }
        )
    if tp is bool or tp is str:
        return _check_plain(value, tp, meta, where, key)
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (tp is int and not isinstance(value, int))
    ):
        raise _mismatch(value, _describe(tp), where, key, meta)
    lo, hi = meta.get("lo"), meta.get("hi")
    if isinstance(value, float) and not math.isfinite(value):  # nan passes every comparison
        raise _mismatch(value, f"a finite number from {lo} to {hi}", where, key, meta)
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise _mismatch(value, f"{_describe(tp)} from {lo} to {hi}", where, key, meta)
    return float(value) if tp is float else value


def _table_value(value: Any, cls: type, where: str, key: str, name: str) -> Any:
    """One table of a table of tables (``[nppa.apps."<name>"]``), checked as a section."""
    section, _, field_name = key.partition("] ")
    title = f'{section.lstrip("[")}.{field_name}."{name}"'
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: [{title}] must be a table, found {_echo(value)}")
    return _build_section(cls, title, value, where, {}, [])


def _check_plain(value: Any, tp: type, meta: Mapping[str, Any], where: str, key: str) -> Any:
    if not isinstance(value, tp):
        raise _mismatch(value, _describe(tp), where, key, meta)
    if isinstance(value, str) and not _is_utf8(value):  # undecodable bytes from the environment
        raise _mismatch(value, "a string of UTF-8 text", where, key, meta)
    choices = meta.get("choices") or ()
    if choices and value not in choices:
        raise _mismatch(value, f"one of {', '.join(repr(c) for c in choices)}", where, key, meta)
    return value


def _mismatch(
    value: Any, expected: str, where: str, key: str, meta: Mapping[str, Any]
) -> ConfigError:
    """The error for a wrong value; a secret's value is never echoed, only its kind."""
    secret = meta.get("secret")
    found = f"a {type(value).__name__} (not shown: a secret)" if secret else _echo(value)
    return ConfigError(f"{where}: {key}: expected {expected}, found {found}")


def _echo(value: Any) -> str:
    """A wrong value as an error may show it: its repr (which escapes what a terminal cannot
    print), through ``mask``, cut to a readable length."""
    text = mask(repr(value))
    return text if len(text) <= 200 else text[:200] + "..."


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
