#define _XOPEN_SOURCE 700
#include "app/wk_fs.h"

#include <ftw.h>
#include <stdio.h>
#include <sys/stat.h>

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static _Thread_local unsigned long long tree_bytes;

static int add_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)path;
  (void)flag;
  (void)ftw;
  tree_bytes += (unsigned long long)sb->st_blocks * 512u;
  return 0;
}

unsigned long long wk_fs_tree_bytes(const char *path) {
  tree_bytes = 0;
  if (nftw(path, add_entry, 16, FTW_PHYS) != 0) return tree_bytes;
  return tree_bytes;
}

int wk_fs_remove_tree(const char *path) {
  return nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}
