"""Pure unit tests: no servers, no sockets, no sleeping; time comes from a clock the test drives."""
