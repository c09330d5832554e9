"""Every exception the plugin raises, under one root, so that a caller can catch the plugin's errors as one.

The hierarchy, with the builtin base each class also keeps (callers that catch ValueError or RuntimeError still
catch it):

    CaovanKernelsError
    ├── SettingError                      a Caovan setting holds a value that is not one of its choices
    │   ├── PluginConfigError  (ValueError)       caovan / caovan_mode keys, CAOVAN_* variables
    │   │   ├── TuringMmaConfigError              caovan_turing_mma / CAOVAN_TURING_MMA
    │   │   └── DraftVocabError                   caovan_draft_vocab and the hot-vocabulary file it names
    │   └── ProxyConfigError   (ValueError)       CAOVAN_TURING_PROXY
    ├── PluginUnavailable                 vLLM will not, or cannot, run the plugin as asked
    │   ├── PluginNotInstalled (RuntimeError)     no installed distribution declares the entry point
    │   └── Turbo3Unavailable  (RuntimeError)     GDNCore is required but cannot run here
    ├── LaunchProfileError                no launch profile from what was given
    │   ├── ModelConfigError   (ValueError)       the model's config.json
    │   ├── InventoryError     (ValueError)       the GPU inventory
    │   └── ProfileError       (ValueError)       the model does not fit these GPUs
    ├── TensorCore75Error                 the sm_75 compile path
    │   ├── RetargetRefused                       a kernel keeps Triton's own lowering
    │   └── CubinError         (ValueError)       a cubin this reader does not understand
    └── UnlaunchableBlocks     (ValueError)       GDN prefill blocks a caller passed that cannot launch here

Each message says what was found and what to do; the classes only sort them.
"""

from __future__ import annotations


class CaovanKernelsError(Exception):
    """The root: anything the plugin raises on purpose."""


class SettingError(CaovanKernelsError):
    """A Caovan setting (environment variable or --additional-config key) holds a value that is not a choice."""


class PluginConfigError(SettingError, ValueError):
    """A plugin setting (caovan, caovan_mode, ...) that cannot be used."""


class TuringMmaConfigError(PluginConfigError):
    """A caovan_turing_mma / CAOVAN_TURING_MMA value that is not a mode."""


class DraftVocabError(PluginConfigError):
    """A caovan_draft_vocab value, or the hot-vocabulary file it names, that cannot be used."""


class ProxyConfigError(SettingError, ValueError):
    """A CAOVAN_TURING_PROXY value that is not one of its choices."""


class PluginUnavailable(CaovanKernelsError):
    """vLLM will not, or cannot, run the plugin as asked."""


class PluginNotInstalled(PluginUnavailable, RuntimeError):
    """This project imports, but no installed distribution declares its entry point: vLLM will not load it."""


class Turbo3Unavailable(PluginUnavailable, RuntimeError):
    """GDNCore is required (caovan_require_turbo3) but cannot run in this engine."""


class LaunchProfileError(CaovanKernelsError):
    """No launch profile can be built from what was given."""


class ModelConfigError(LaunchProfileError, ValueError):
    """config.json is missing or lacks a field the profile needs; the message says which and where."""


class InventoryError(LaunchProfileError, ValueError):
    """A GPU inventory that cannot be read; the message says what and how to write it."""


class ProfileError(LaunchProfileError, ValueError):
    """The model cannot be planned on these GPUs; the message says why and what to change."""


class TensorCore75Error(CaovanKernelsError):
    """The sm_75 compile path: retargeting a kernel, reading its binary."""


class RetargetRefused(TensorCore75Error):
    """The sm_80 lowering produced something Turing lacks; the kernel keeps Triton's own sm_75 lowering."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


class CubinError(TensorCore75Error, ValueError):
    """The bytes are not a cubin this reader understands."""


class UnlaunchableBlocks(CaovanKernelsError, ValueError):
    """GDN prefill launch shapes a caller handed in that kernel 2 cannot run with on the compile target."""
