// The one doctest main of the CPU test binary; every other file in tests/cpu holds cases only.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
