import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device and torch with CUDA (skipped "
                                       "without)")


def pytest_collection_modifyitems(config, items):
    torch = None
    try:
        import torch
    except ImportError:
        pass
    if torch is not None and torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="no CUDA device (or no torch with CUDA)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
