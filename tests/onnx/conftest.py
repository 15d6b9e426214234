def pytest_terminal_summary(terminalreporter):
    from tests.onnx.test_conformance import RESULTS

    if RESULTS:
        passed = sum(RESULTS.values())
        terminalreporter.write_line(
            f"ONNX conformance: {passed}/{len(RESULTS)} official node cases passed "
            f"({100.0 * passed / len(RESULTS):.1f} %)"
        )
