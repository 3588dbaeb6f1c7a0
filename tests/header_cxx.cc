// Compiles the public header as C++ and calls one function, so a C-only
// construct in headroom.h breaks the build.
#include "headroom.h"

int main() {
    return hr_status_name(HR_OK)[0] == 'H' ? 0 : 1;
}
