import json
import subprocess
import sys

import pytest

from routing_rl.app.describe import main


def test_json_reports_every_node_and_the_totals(capsys):
    assert main(["--arch", "static-8", "--json"]) == 0
    description = json.loads(capsys.readouterr().out)
    assert description["total_macs"]["full_evaluation"] == 20_551_424
    assert description["total_macs"]["transforms"] == 20_530_944
    assert description["total_macs"]["heads"] == 20_480
    assert [n["name"] for n in description["nodes"]][:2] == ["col1", "col2"]


def test_json_for_the_tree_and_options(capsys):
    assert main(["--arch", "tree", "--classes", "2", "--width", "2", "--k-cpt-input", "--json"]) == 0
    description = json.loads(capsys.readouterr().out)
    assert description["leaves"] == 47 and description["junctions"] == 47 - 8
    assert description["k_cpt_input"] is True
    assert sum(n["macs"] + n["router_macs"] for n in description["nodes"]) == description["total_macs"]["full_evaluation"]


def test_table_lists_nodes_and_totals(capsys):
    assert main(["--arch", "chain"]) == 0
    out = capsys.readouterr().out
    assert "col8" in out and "exit1" in out and "20,699,872" in out


@pytest.mark.parametrize("args, message", [(["--arch", "resnet"], "unknown arch 'resnet'"), (["--width", "0"], "width must be")])
def test_bad_arguments_exit_2_with_one_line(args, message):
    result = subprocess.run([sys.executable, "-m", "routing_rl.app.describe", *args], capture_output=True, text=True)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr
