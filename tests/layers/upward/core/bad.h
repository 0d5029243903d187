// A deliberate upward include: core must not include runtime (negative control of cmake/check_layers.cmake).
#pragma once
#include "runtime/engine.h"
