/* wk_version.h: the version and git commit every program prints with --version.
 * The definitions are generated at build time (cmake/version_gen.cmake): the project
 * version from CMakeLists.txt, and the commit from git, or from cmake/commit.txt in a
 * `git archive` tarball, or "unknown". */
#ifndef WK_VERSION_H
#define WK_VERSION_H

/** The project version, e.g. "0.1.0". */
extern const char wk_version[];
/** The full git commit hash the program was built from ("-dirty" appended when the
 * tree had changes), or "unknown". */
extern const char wk_git_commit[];

#endif
