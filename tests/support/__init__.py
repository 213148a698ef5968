"""What the tests share: helpers, the live server, the generated models and the stand-in
servers (the hub, an image host), imported as tests.support.<name>."""
