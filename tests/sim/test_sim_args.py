"""`capcon sim` refuses rates and time scales that are not finite positive numbers, before any server starts."""

import pytest

from console.cli import main


@pytest.mark.parametrize("option", ["--time-scale", "--rps-scale"])
@pytest.mark.parametrize("value", ["inf", "nan", "0", "-2"])
def test_non_finite_or_non_positive_scales_exit_2(capsys, option, value):
    with pytest.raises(SystemExit) as exited:
        main(["sim", "plans/internal-assistant-18rps.yaml", option, value])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: '{value}' must be a finite number greater than 0" in err
    assert "Traceback" not in err
