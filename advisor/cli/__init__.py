"""The command-line front end (`advisor`): one module per command group; it parses and renders, the service layer decides."""
