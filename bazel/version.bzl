"""sluice's version, written here only: the generated <sluice_version.h> (and so every binary's
--version), the installed sluice.pc and the CMake package files all take it from here."""

SLUICE_VERSION = "0.9.0"
