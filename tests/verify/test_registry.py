"""The registry: names and params resolve to typed verifiers, or fail with the precise reason."""

import sys

import pytest

from rlvr.protocol.tasks import VerifierSpec
from rlvr.verify.config import VerifyConfig
from rlvr.verify.registry import (
    Verifier,
    VerifierPluginError,
    VerifierSpecError,
    VerifyContext,
    known,
    load_plugins,
    plugins,
    register,
    resolve,
)
from rlvr.verify.simple import ExactParams


def test_unknown_verifier_names_it_and_lists_the_known_ones():
    with pytest.raises(VerifierSpecError) as err:
        resolve(VerifierSpec(name="mth", params={"gold": "1"}))
    # Plug-ins another test loaded in this process are listed too; the built-ins always are.
    from rlvr.verify.registry import _BUILTINS

    assert str(err.value).startswith("unknown verifier 'mth' (known: " + ", ".join(sorted(_BUILTINS)[:3]))
    assert all(name in str(err.value) for name in _BUILTINS)


def test_spec_error_is_a_value_error():
    assert issubclass(VerifierSpecError, ValueError)


def test_bad_param_type_names_the_parameter():
    with pytest.raises(VerifierSpecError) as err:
        resolve(VerifierSpec(name="exact", params={"gold": 3}))
    assert str(err.value) == "bad params for 'exact': Expected `str | array`, got `int` - at `$.gold`"


def test_unknown_param_is_rejected_by_name():
    with pytest.raises(VerifierSpecError) as err:
        resolve(VerifierSpec(name="exact", params={"gold": "3", "golden": "3"}))
    assert str(err.value) == "bad params for 'exact': Object contains unknown field `golden`"


def test_missing_param_is_named():
    with pytest.raises(VerifierSpecError) as err:
        resolve(VerifierSpec(name="regex", params={}))
    assert str(err.value) == "bad params for 'regex': Object missing required field `pattern`"


def test_check_hook_failure_is_a_spec_error():
    with pytest.raises(VerifierSpecError, match=r"bad params for 'regex': invalid pattern '\(': missing \), unterminated subpattern at position 0 - at `\$.pattern`"):
        resolve(VerifierSpec(name="regex", params={"pattern": "("}))


def test_composite_part_errors_name_the_part():
    spec = VerifierSpec(name="composite", params={"parts": [{"name": "exact", "params": {"gold": "1"}}, {"name": "fmt"}]})
    with pytest.raises(VerifierSpecError) as err:
        resolve(spec)
    assert str(err.value).startswith("bad params for 'composite': part 1: unknown verifier 'fmt' (known:")


def test_resolved_verifier_has_typed_params_and_stamps_the_spec_name():
    bound = resolve(VerifierSpec(name="exact", params={"gold": "42"}))
    assert isinstance(bound.params, ExactParams)
    assert bound.spec == VerifierSpec(name="exact", params={"gold": "42"})
    verdict = bound("42", VerifyContext())
    assert (verdict.reward, verdict.outcome, verdict.verifier) == (1.0, "ok", "exact")


def _echo(completion, params, ctx):
    from rlvr.protocol.samples import Verdict

    return Verdict(reward=float(len(completion)), outcome="ok", verifier="whatever")


ECHO = Verifier("echo", ExactParams, _echo)


def test_a_plugin_listed_in_config_resolves_by_its_import_path():
    load_plugins([f"{__name__}:ECHO"])
    assert f"{__name__}:ECHO" in known() and f"{__name__}:ECHO" in plugins()
    bound = resolve(VerifierSpec(name=f"{__name__}:ECHO", params={"gold": ""}))
    verdict = bound("abc")
    assert verdict.reward == 3.0
    assert verdict.verifier == f"{__name__}:ECHO"


def test_a_plugin_must_import_and_name_a_verifier_object():
    with pytest.raises(VerifierPluginError, match=r"plug-in 'os:system' takes \(command\): a reward function is bound by its parameter names"):
        load_plugins(["os:system"])
    with pytest.raises(VerifierPluginError, match=r"plug-in 'no_such_module_xyz:V': cannot import 'no_such_module_xyz'"):
        load_plugins(["no_such_module_xyz:V"])


def test_a_message_naming_an_unlisted_import_path_is_refused_and_nothing_is_imported(tmp_path, monkeypatch):
    # Regression (issue 13 item 1): resolving a spec used to import whatever module it named.
    marker = tmp_path / "imported"
    (tmp_path / "planted_by_a_message.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n"
        "from rlvr.verify.simple import EXACT as V\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("planted_by_a_message:V", "unittest.__main__:x", "os:system"):
        with pytest.raises(VerifierSpecError, match=r"a message cannot make the verifier import code; list it in \[verify\] plugins"):
            resolve(VerifierSpec(name=name))
    assert not marker.exists()
    assert "planted_by_a_message" not in sys.modules and "unittest.__main__" not in sys.modules


def test_a_composite_part_naming_an_import_path_is_refused_too():
    spec = VerifierSpec(name="composite", params={"parts": [{"name": "unittest.__main__:x"}]})
    with pytest.raises(VerifierSpecError, match="list it in \\[verify\\] plugins"):
        resolve(spec)
    assert "unittest.__main__" not in sys.modules


def test_plugins_config_checks_the_form_and_names_the_entry():
    VerifyConfig(plugins=("pkg.mod:ATTR",))
    with pytest.raises(ValueError, match=r"plugins\[1\] = 'pkg/mod.py' is not 'package.module:ATTR'"):
        VerifyConfig(plugins=("a:B", "pkg/mod.py"))


def test_register_adds_a_name_and_protects_builtins():
    register(Verifier("echo_for_test", ExactParams, _echo))
    assert "echo_for_test" in known()
    assert resolve(VerifierSpec(name="echo_for_test", params={"gold": ""}))("ab").reward == 2.0
    with pytest.raises(ValueError, match="reserved"):
        register(Verifier("math", ExactParams, _echo))
