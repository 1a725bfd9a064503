/* wk_fs.h: small filesystem helpers for the adapters. */
#ifndef WK_FS_H
#define WK_FS_H

/** Removes `path` and everything under it (no symlinks followed). Returns 0, or -1
 * when something could not be removed (errno set). */
int wk_fs_remove_tree(const char *path);

/** Bytes allocated on disk under `path` (files and directories, no symlinks
 * followed); 0 when it cannot be read. */
unsigned long long wk_fs_tree_bytes(const char *path);

#endif
