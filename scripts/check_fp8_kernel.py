#!/usr/bin/env python3
"""Checks the fp8 conversions of the gathered reduction kernels
(crates/tpcomm/src/cuda/kernels/gathered.cu: fp8_to_f32, f32_to_fp8) on the
host, without a GPU: the two functions are cut out of the kernel source as
they are, compiled with g++ (the few CUDA intrinsics they use defined as
host equivalents), and compared with the formats' definition: every one of
the 256 codes of e4m3 and e5m2 decoded, and every STRIDE-th f32 bit pattern
(default 7: 613 million per format, about 15 s) encoded, against the nearest
code by search, ties to even, saturated as __NV_SATFINITE does.

The unit tests (crates/tpcomm/src/cuda/fp8.rs) test the Rust model of the
same functions; this tests the CUDA text itself. Needs g++.

Usage: python3 scripts/check_fp8_kernel.py [STRIDE]
"""
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRE = r'''
#include <cstdio>
#include <cstring>
#include <cmath>
#include <cstdint>
typedef unsigned int u32;
#define __device__
#define __forceinline__ inline
static inline float __uint_as_float(u32 u){float f; memcpy(&f,&u,4); return f;}
static inline u32 __float_as_uint(float f){u32 u; memcpy(&u,&f,4); return u;}
static inline float __fmul_rn(float a,float b){volatile float r=a*b; return r;}
'''
POST = r'''
template <u32 MB, u32 BIAS, u32 MAXCODE>
int check(const char* name){
  // definition of every code
  double val[256];
  for(int c=0;c<256;c++){
    int s=(c&0x80)?-1:1; int e=(c&0x7f)>>MB; int m=c&((1<<MB)-1);
    double v;
    if(e==0) v=s*std::ldexp((double)m/(1<<MB),1-(int)BIAS); else v=s*std::ldexp(1.0+(double)m/(1<<MB),e-(int)BIAS);
    bool nan = (MB==3 && (c&0x7f)==0x7f) || (MB==2 && e==31 && m!=0);
    bool inf = (MB==2 && e==31 && m==0);
    float d=fp8_to_f32<MB,BIAS>(c);
    if(nan){ if(!std::isnan(d)){printf("%s decode %02x\n",name,c);return 1;} continue;}
    if(inf){ if(!(std::isinf(d) && (d<0)==(s<0))){printf("%s decode inf %02x\n",name,c);return 1;} continue;}
    if((double)d!=v || std::signbit(d)!=(s<0)){printf("%s decode %02x %g %g\n",name,c,d,v);return 1;}
    val[c]=v;
  }
  double top=val[MAXCODE], ulp=top-val[MAXCODE-1];
  unsigned long long bad=0, n=0;
  // Every midpoint of two neighbouring codes (both signs) and the f32 on
  // either side of it first, then every STRIDE-th f32 bit pattern.
  static u32 extra[6 * 256]; int nextra=0;
  for(int c=0;c<(int)MAXCODE;c++) for(u32 sign=0; sign<=0x80; sign+=0x80){
    float mid=(float)((val[c]+val[c+1])/2); u32 mb=__float_as_uint(mid)|(sign<<24);
    extra[nextra++]=mb; extra[nextra++]=mb+1; if((mb&0x7fffffffu)!=0) extra[nextra++]=mb-1;
  }
  for(unsigned long long k=0; k < (unsigned long long)nextra + 0x100000000ull; k+=(k<(unsigned long long)nextra?1:STRIDE)){
    unsigned long long bits = k<(unsigned long long)nextra ? extra[k] : k-nextra;
    float x=__uint_as_float((u32)bits);
    u32 got=f32_to_fp8<MB,BIAS,MAXCODE>(x);
    u32 want;
    if(std::isnan(x)) want=0x7f;
    else {
      double a=std::fabs((double)x); u32 sign=std::signbit(x)?0x80:0;
      if(std::isinf(a)) want=sign|MAXCODE;
      else {
        // nearest by binary search over the monotone positive codes 0..MAXCODE+1
        int lo=0, hi=MAXCODE+1;
        auto v=[&](int c){return c==(int)MAXCODE+1? top+ulp : val[c];};
        if(a>=v(hi)) lo=hi; else { while(hi-lo>1){int mid=(lo+hi)/2; if(v(mid)<=a) lo=mid; else hi=mid;} }
        int best=lo;
        if(lo<(int)MAXCODE+1){ double dl=a-v(lo), dh=v(lo+1)-a; if(dh<dl || (dh==dl && ((lo+1)%2==0))) best=lo+1; }
        if(best>(int)MAXCODE) best=MAXCODE;
        want=sign|best;
      }
    }
    n++;
    if(got!=want){ if(bad<5) printf("%s %08llx %g got %02x want %02x\n",name,bits,x,got,want); bad++; }
  }
  printf("%s: %llu of %llu f32 patterns differ from nearest-even+saturate\n",name,bad,n);
  return bad!=0;
}
int main(){ return check<3,7,0x7e>("e4m3") | check<2,15,0x7b>("e5m2"); }
'''


def main():
    stride = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    src = open(os.path.join(ROOT, "crates/tpcomm/src/cuda/kernels/gathered.cu")).read()
    a = src.index("template <u32 MB, u32 BIAS>\n__device__ __forceinline__ float fp8_to_f32")
    b = src.index("// The value whose bit pattern")
    with tempfile.TemporaryDirectory(prefix="tpcomm-fp8-check.") as d:
        cpp, exe = os.path.join(d, "check.cpp"), os.path.join(d, "check")
        with open(cpp, "w") as f:
            f.write("#define STRIDE %dull\n" % stride + PRE + src[a:b] + POST)
        subprocess.run(["g++", "-O2", "-std=c++17", "-o", exe, cpp], check=True)
        return subprocess.run([exe]).returncode


if __name__ == "__main__":
    sys.exit(main())
