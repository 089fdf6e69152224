#pragma once
// The precompiled header of the test programs (tests/CMakeLists.txt, TRIDENT_TEST_PCH): headers that
// most test sources include and that take long to parse. Sources still include what they use; this
// only makes the second and later parses free.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
