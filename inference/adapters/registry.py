from inference.adapters.base import FamilyAdapter, FamilyProfile
from inference.adapters.families import ChatMLAdapter, GemmaAdapter, Llama3Adapter, MistralAdapter
from inference.adapters.harmony import HarmonyAdapter

ADAPTERS: dict[str, type[FamilyAdapter]] = {
    cls.name: cls
    for cls in (
        FamilyAdapter,
        Llama3Adapter,
        ChatMLAdapter,
        MistralAdapter,
        GemmaAdapter,
        HarmonyAdapter,
    )
}


def adapter_choices() -> list[tuple[str, str]]:
    return [(name, cls.label) for name, cls in ADAPTERS.items()]


def get_adapter(profile: FamilyProfile) -> FamilyAdapter:
    # A family row naming an adapter this build no longer has falls back to the default.
    return ADAPTERS.get(profile.adapter, FamilyAdapter)(profile)
