# Turns a file into a C source defining `const unsigned char NAME[]` (its bytes and a NUL)
# and `NAME_len`, so the binary carries it (the status page: src/app/wk_status_page.html).
#   cmake -DIN=file -DOUT=file.c -DNAME=symbol -P cmake/EmbedFile.cmake
file(READ "${IN}" hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" bytes "${bytes}")
file(WRITE "${OUT}" "/* Generated from ${IN} by cmake/EmbedFile.cmake: do not edit. */\n"
  "#include <stddef.h>\nextern const unsigned char ${NAME}[];\nextern const size_t ${NAME}_len;\nconst unsigned char ${NAME}[] = {\n${bytes}0x00};\nconst size_t ${NAME}_len = sizeof ${NAME} - 1;\n")
