import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

django_application = get_asgi_application()

# Imported once Django is set up: the door writes its 413s with the edge's dialects.
from inference.edge.door import Door  # noqa: E402

# Body limits apply before Django reads a byte of the body (inference/edge/door.py).
application = Door(django_application)
