"""Importing this module installs `gradstream.alias` for good: what a child process of an
aliased parent does first (see `gradstream.alias._InstallInChild`)."""

from gradstream.alias import install

install()
