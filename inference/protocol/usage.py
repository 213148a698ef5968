from inference.protocol.common import Usage

__all__ = ["Usage"]
