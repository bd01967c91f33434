"""The HTTP side: the aiohttp app, web-config (TLS, basic auth), the login guard and the
container health check."""
