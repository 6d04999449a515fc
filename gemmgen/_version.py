"""The package version (its own module, so that every stage can read it without importing the
package's public face)."""
__version__ = "0.1.0"
