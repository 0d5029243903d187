// Part of the negative control of cmake/check_layers.cmake.
#pragma once
