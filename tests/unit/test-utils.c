/* Unit tests for libcommon/utils.h: durations to a tenth of a millisecond
 * (dsec_ms1) and timeouts rounded up (dsec_ceil_int), which stand in for
 * libm's round and ceil so that dsec-run loads no libm, and record times
 * (dsec_time_rfc3339, UTC without reading the time zone). */
#include <config.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tap.h"
#include "utils.h"

static void test_ms1(void)
{
  /* what records show: round half away from zero, to a tenth */
  ok(dsec_ms1(0) == 0, "0 stays 0");
  ok(dsec_ms1(1.04) == 1.0, "1.04 -> 1.0");
  ok(dsec_ms1(1.06) == 1.1, "1.06 -> 1.1");
  ok(dsec_ms1(12.25) == 12.3, "12.25 (exact) -> 12.3, half away from zero");
  ok(dsec_ms1(-12.25) == -12.3, "-12.25 -> -12.3");
  ok(dsec_ms1(-0.04) == 0, "-0.04 -> 0");
  ok(dsec_ms1(3600000.04) == 3600000.0, "an hour in ms keeps its digits");
  ok(dsec_ms1(86400000.0 * 365) == 86400000.0 * 365, "a year in ms too");
  {
    /* the same as the libm expression it replaced, over a spread of
     * durations */
    int differ = 0;
    for (int i = -100000; i <= 100000; i++) {
      double ms = i * 0.0137;
      if (dsec_ms1(ms) != round(ms * 10) / 10)
        differ++;
    }
    is_int(differ, 0, "equal to round(ms * 10) / 10 for 200,001 durations");
  }
}

static void test_ceil_int(void)
{
  is_int(dsec_ceil_int(0), 0, "0 -> 0");
  is_int(dsec_ceil_int(0.001), 1, "0.001 -> 1: a poll never spins at 0 ms");
  is_int(dsec_ceil_int(1), 1, "1 -> 1");
  is_int(dsec_ceil_int(1.5), 2, "1.5 -> 2");
  is_int(dsec_ceil_int(-0.5), 0, "-0.5 -> 0");
  is_int(dsec_ceil_int(-1.5), -1, "-1.5 -> -1");
  is_int(dsec_ceil_int(2000000000.5), 2000000001, "large values");
  {
    int differ = 0;
    for (int i = -100000; i <= 100000; i++) {
      double x = i * 0.0137;
      if (dsec_ceil_int(x) != (int) ceil(x))
        differ++;
    }
    is_int(differ, 0, "equal to (int) ceil(x) for 200,001 values");
  }
}

static void test_rfc3339(void)
{
  char *t = dsec_time_rfc3339();
  struct tm tm = { 0 };
  const char *rest;
  time_t now = time(NULL), then;

  is_int((int) strlen(t), 24, "YYYY-MM-DDTHH:MM:SS.mmmZ is 24 characters");
  rest = strptime(t, "%Y-%m-%dT%H:%M:%S", &tm);
  ok(rest && rest[0] == '.' && rest[1] >= '0' && rest[1] <= '9' &&
       rest[4] == 'Z' && rest[5] == 0,
     "date, time, milliseconds and Z: %s", t);
  then = timegm(&tm);
  ok(then >= now - 2 && then <= now + 2, "UTC, now (%s)", t);
  free(t);
}

int main(void)
{
  test_ms1();
  test_ceil_int();
  test_rfc3339();
  return done_testing();
}
