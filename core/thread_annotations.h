// Clang thread-safety annotations (-Wthread-safety); no-ops on other compilers.
// Say which mutex guards what: `int count_ ASGD_GUARDED_BY(mu_);`
#pragma once

#if defined(__clang__)
#define ASGD_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define ASGD_THREAD_ANNOTATION_(x)
#endif

#define ASGD_GUARDED_BY(x) ASGD_THREAD_ANNOTATION_(guarded_by(x))
#define ASGD_PT_GUARDED_BY(x) ASGD_THREAD_ANNOTATION_(pt_guarded_by(x))
#define ASGD_REQUIRES(...) ASGD_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
#define ASGD_EXCLUDES(...) ASGD_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))
// For code whose locking the analysis cannot follow (a variable number of locks held at
// once); say in a comment why it is right.
#define ASGD_NO_THREAD_SAFETY_ANALYSIS ASGD_THREAD_ANNOTATION_(no_thread_safety_analysis)
