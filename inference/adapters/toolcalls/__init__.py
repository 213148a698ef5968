from inference.adapters.toolcalls.base import CallEvent, Function, ToolSyntax
from inference.adapters.toolcalls.registry import syntax_choices, syntax_class

__all__ = ["CallEvent", "Function", "ToolSyntax", "syntax_choices", "syntax_class"]
