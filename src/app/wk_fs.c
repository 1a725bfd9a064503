#define _XOPEN_SOURCE 700
#include "app/wk_fs.h"

#include <ftw.h>
#include <stdio.h>

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path);
}

int wk_fs_remove_tree(const char *path) {
  return nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}
